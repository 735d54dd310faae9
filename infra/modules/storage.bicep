// Storage for the function app: the Flex Consumption deployment package container and the
// host's own blobs (AzureWebJobsStorage: leases, host keys). Shared keys are off, so only
// Entra identities (the function's managed identity, azd's deploying user) can reach it.
param name string
param location string
param tags object = {}
param deploymentContainerName string

@allowed(['Enabled', 'Disabled'])
@description('Disabled when vnetEnabled puts a private endpoint in front of the blob service.')
param publicNetworkAccess string = 'Enabled'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35: By default (vnetEnabled false) the app reaches its deployment storage over the public endpoint, Entra-only (allowSharedKeyAccess false); vnetEnabled denies public traffic and adds a private endpoint.
  // checkov:skip=CKV_AZURE_59: Same as CKV_AZURE_35: public access is on only while vnetEnabled is false, and then every request needs an Entra token with a role on this account.
  // checkov:skip=CKV_AZURE_206: Holds only the re-deployable app package and host leases; LRS is enough and geo-replication would double the cost for nothing that cannot be rebuilt by azd deploy.
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    // Identity auth only: the deployment and the host use the function's managed identity.
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      defaultAction: publicNetworkAccess == 'Enabled' ? 'Allow' : 'Deny'
      bypass: 'AzureServices'
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: true
      days: 7
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: 7
    }
  }
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

output name string = storage.name
output id string = storage.id
output blobEndpoint string = storage.properties.primaryEndpoints.blob
output deploymentContainerName string = deploymentContainer.name
