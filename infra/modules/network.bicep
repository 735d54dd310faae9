// Optional private networking (vnetEnabled, off by default), as in the official azd Flex
// Consumption templates: a VNet with a subnet delegated to the function app's VNet integration
// and one for private endpoints; private endpoints and private DNS zones for the deployment
// storage (blob), Cosmos DB and, on Premium only, Service Bus (Standard has no private endpoints).
// With it on, those services refuse public traffic (see main.bicep), so laptop tooling
// (`orders load` / `orders verify`) must run from inside the VNet.
param vnetName string
param location string
param tags object = {}

param storageAccountName string
param cosmosAccountName string
param serviceBusNamespaceName string

@description('The Cosmos DB account endpoint (https://<account>.documents.azure.com:443/ in the public cloud): its DNS suffix names the private DNS zone.')
param cosmosEndpoint string

@description('The Service Bus namespace host name (<namespace>.servicebus.windows.net in the public cloud): its DNS suffix names the private DNS zone.')
param serviceBusFullyQualifiedNamespace string

@description('Private endpoint for Service Bus: Premium namespaces only.')
param serviceBusPrivateEndpoint bool = false

var appSubnetName = 'app'
var privateEndpointSubnetName = 'private-endpoints'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource cosmosAccount 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' existing = {
  name: cosmosAccountName
}

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

resource vnet 'Microsoft.Network/virtualNetworks@2024-05-01' = {
  name: vnetName
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: ['10.0.0.0/16']
    }
    subnets: [
      {
        // Flex Consumption VNet integration needs this delegation (and no underscore in the name).
        name: appSubnetName
        properties: {
          addressPrefix: '10.0.1.0/24'
          delegations: [
            {
              name: 'flex-consumption'
              properties: {
                serviceName: 'Microsoft.App/environments'
              }
            }
          ]
        }
      }
      {
        name: privateEndpointSubnetName
        properties: {
          addressPrefix: '10.0.2.0/24'
          privateEndpointNetworkPolicies: 'Disabled'
        }
      }
    ]
  }
}

// One private DNS zone per service, linked to the VNet, so the public host names resolve to the
// private endpoints from inside it. Each zone is `privatelink.` + the service's DNS suffix in the
// cloud being deployed to, never a public-cloud literal: storage's suffix comes from
// environment() (core.windows.net, core.usgovcloudapi.net, core.chinacloudapi.cn), and since
// environment() has none for Cosmos DB or Service Bus, theirs come from the endpoints the
// accounts were given (documents.azure.com / .us / .cn; servicebus.windows.net /
// .usgovcloudapi.net / .chinacloudapi.cn).
var cosmosHost = split(split(split(cosmosEndpoint, '//')[1], '/')[0], ':')[0]
var cosmosDnsSuffix = substring(cosmosHost, indexOf(cosmosHost, '.') + 1)
var serviceBusDnsSuffix = substring(serviceBusFullyQualifiedNamespace, indexOf(serviceBusFullyQualifiedNamespace, '.') + 1)
var zones = [
  'privatelink.blob.${environment().suffixes.storage}'
  'privatelink.${cosmosDnsSuffix}'
  'privatelink.${serviceBusDnsSuffix}'
]

resource dnsZones 'Microsoft.Network/privateDnsZones@2020-06-01' = [
  for zone in zones: {
    name: zone
    location: 'global'
    tags: tags
  }
]

resource dnsLinks 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2020-06-01' = [
  for (zone, i) in zones: {
    parent: dnsZones[i]
    name: '${vnetName}-link'
    location: 'global'
    tags: tags
    properties: {
      registrationEnabled: false
      virtualNetwork: {
        id: vnet.id
      }
    }
  }
]

resource storageEndpoint 'Microsoft.Network/privateEndpoints@2024-05-01' = {
  name: 'pe-blob-${storageAccountName}'
  location: location
  tags: tags
  properties: {
    subnet: {
      id: '${vnet.id}/subnets/${privateEndpointSubnetName}'
    }
    privateLinkServiceConnections: [
      {
        name: 'blob'
        properties: {
          privateLinkServiceId: storage.id
          groupIds: ['blob']
        }
      }
    ]
  }
}

resource cosmosEndpoint 'Microsoft.Network/privateEndpoints@2024-05-01' = {
  name: 'pe-cosmos-${cosmosAccountName}'
  location: location
  tags: tags
  properties: {
    subnet: {
      id: '${vnet.id}/subnets/${privateEndpointSubnetName}'
    }
    privateLinkServiceConnections: [
      {
        name: 'sql'
        properties: {
          privateLinkServiceId: cosmosAccount.id
          groupIds: ['Sql']
        }
      }
    ]
  }
}

resource serviceBusEndpoint 'Microsoft.Network/privateEndpoints@2024-05-01' = if (serviceBusPrivateEndpoint) {
  name: 'pe-sb-${serviceBusNamespaceName}'
  location: location
  tags: tags
  properties: {
    subnet: {
      id: '${vnet.id}/subnets/${privateEndpointSubnetName}'
    }
    privateLinkServiceConnections: [
      {
        name: 'namespace'
        properties: {
          privateLinkServiceId: namespace.id
          groupIds: ['namespace']
        }
      }
    ]
  }
}

// Each endpoint registers its address in its service's private DNS zone.
resource storageZoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-05-01' = {
  parent: storageEndpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [{ name: 'blob', properties: { privateDnsZoneId: dnsZones[0].id } }]
  }
}

resource cosmosZoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-05-01' = {
  parent: cosmosEndpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [{ name: 'cosmos', properties: { privateDnsZoneId: dnsZones[1].id } }]
  }
}

resource serviceBusZoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-05-01' = if (serviceBusPrivateEndpoint) {
  parent: serviceBusEndpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [{ name: 'servicebus', properties: { privateDnsZoneId: dnsZones[2].id } }]
  }
}

output appSubnetId string = '${vnet.id}/subnets/${appSubnetName}'
output vnetName string = vnet.name
