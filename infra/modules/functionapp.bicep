// The function app on Flex Consumption (FC1): Python, one user-assigned identity for everything
// (deployment storage, host storage, Service Bus trigger, Cosmos DB, Application Insights), and
// app settings that are exactly what the code reads (tests/infra/test_settings_parity.py).
param name string
param planName string
param location string
param tags object = {}

param identityId string
param identityClientId string

param storageBlobEndpoint string
param deploymentContainerName string

param applicationInsightsConnectionString string

param serviceBusFullyQualifiedNamespace string
param queueName string

param cosmosEndpoint string
param cosmosDatabaseName string
param cosmosOrdersContainerName string
param cosmosIdempotencyContainerName string

@allowed(['3.11', '3.12'])
param pythonVersion string = '3.11'

@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 100

@allowed([512, 2048, 4096])
param instanceMemoryMB int = 2048

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  // checkov:skip=CKV_AZURE_225: Zone redundancy on Flex Consumption is region-dependent and bills always-ready instances; a reference deployment scales to zero instead. Enable it per region for production.
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    // Flex Consumption runs on Linux only.
    reserved: true
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  // checkov:skip=CKV_AZURE_222: The order HTTP API is the public entry point of this reference; requests are authenticated (function keys / App Service Authentication), not network-restricted.
  // checkov:skip=CKV_AZURE_212: Flex Consumption scales from zero on queue length and HTTP load; a minimum instance count would be always-ready billing the reference does not need.
  // checkov:skip=CKV_AZURE_213: App Service health check does not apply to Flex Consumption instances, which the platform recycles itself; readiness is visible in Application Insights.
  name: name
  location: location
  // azd finds the deployment target of service `api` (azure.yaml) by this tag.
  tags: union(tags, { 'azd-service-name': 'api' })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    publicNetworkAccess: 'Enabled'
    // checkov:skip=CKV_AZURE_17: Client certificates would lock out ordinary HTTPS clients of the order API; callers authenticate with function keys or App Service Authentication instead.
    clientCertEnabled: false
    siteConfig: {
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      ftpsState: 'Disabled'
      http20Enabled: true
      // Flex Consumption takes no FUNCTIONS_WORKER_RUNTIME / FUNCTIONS_EXTENSION_VERSION: the
      // runtime comes from functionAppConfig.runtime below.
      appSettings: [
        // Host storage through the identity; no AzureWebJobsStorage connection string exists.
        { name: 'AzureWebJobsStorage__blobServiceUri', value: storageBlobEndpoint }
        { name: 'AzureWebJobsStorage__credential', value: 'managedidentity' }
        { name: 'AzureWebJobsStorage__clientId', value: identityClientId }
        // Service Bus trigger connection `ServiceBusConnection`, identity-based.
        { name: 'ServiceBusConnection__fullyQualifiedNamespace', value: serviceBusFullyQualifiedNamespace }
        { name: 'ServiceBusConnection__credential', value: 'managedidentity' }
        { name: 'ServiceBusConnection__clientId', value: identityClientId }
        { name: 'ORDERS_QUEUE', value: queueName }
        { name: 'COSMOS_ENDPOINT', value: cosmosEndpoint }
        { name: 'COSMOS_DATABASE', value: cosmosDatabaseName }
        { name: 'COSMOS_CONTAINER', value: cosmosOrdersContainerName }
        { name: 'COSMOS_IDEMPOTENCY_CONTAINER', value: cosmosIdempotencyContainerName }
        // DefaultAzureCredential in the app picks the user-assigned identity through this.
        { name: 'AZURE_CLIENT_ID', value: identityClientId }
        { name: 'APPLICATIONINSIGHTS_CONNECTION_STRING', value: applicationInsightsConnectionString }
        // Application Insights refuses instrumentation-key ingestion; the host sends Entra tokens.
        { name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING', value: 'ClientId=${identityClientId};Authorization=AAD' }
      ]
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storageBlobEndpoint}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
      }
      runtime: {
        name: 'python'
        version: pythonVersion
      }
    }
  }
}

// azd deploys with an Entra token, so neither FTP nor SCM basic-auth publishing is needed.
resource ftpPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'scm'
  properties: {
    allow: false
  }
}

output name string = functionApp.name
output url string = 'https://${functionApp.properties.defaultHostName}'
