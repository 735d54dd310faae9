// Cosmos DB for NoSQL: the account, database `orders` and its four containers (orders,
// idempotency, the fan-out consumers' inbox, the outbox dispatcher's leases). With local auth
// off the data-plane role cannot create databases or containers, so they exist only because
// this template creates them; the app never creates them in Azure.
param accountName string
param location string
param tags object = {}

@allowed(['Serverless', 'Provisioned'])
param capacityMode string = 'Serverless'

@minValue(1000)
@description('Autoscale maximum RU/s shared by all four containers (Provisioned only).')
param autoscaleMaxThroughput int = 1000

@allowed(['Enabled', 'Disabled'])
@description('Disabled when vnetEnabled puts a private endpoint in front of the account.')
param publicNetworkAccess string = 'Enabled'

param databaseName string = 'orders'
param ordersContainerName string = 'orders'
param idempotencyContainerName string = 'idempotency'
param inboxContainerName string = 'inbox'
param leasesContainerName string = 'leases'

var serverless = capacityMode == 'Serverless'

resource account 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' = {
  // checkov:skip=CKV_AZURE_101: By default (vnetEnabled false) the app and the laptop tooling reach Cosmos DB over its public endpoint, Entra-only (disableLocalAuth); vnetEnabled turns public access off behind a private endpoint.
  // checkov:skip=CKV_AZURE_99: No IP rules: Flex Consumption outbound addresses are not fixed without VNet integration; vnetEnabled replaces them with a private endpoint and no public access.
  name: accountName
  location: location
  tags: tags
  kind: 'GlobalDocumentDB'
  properties: {
    databaseAccountOfferType: 'Standard'
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: false
      }
    ]
    // Session gives read-your-writes for the 409 -> point-read path within one client.
    consistencyPolicy: {
      defaultConsistencyLevel: 'Session'
    }
    capabilities: serverless ? [{ name: 'EnableServerless' }] : []
    // Entra ID only: account keys are refused, so COSMOS_KEY is never set in Azure.
    disableLocalAuth: true
    // Keys could otherwise still change databases and containers through the data plane.
    disableKeyBasedMetadataWriteAccess: true
    minimalTlsVersion: 'Tls12'
    publicNetworkAccess: publicNetworkAccess
    enableAutomaticFailover: false
    enableFreeTier: false
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-11-15' = {
  parent: account
  name: databaseName
  properties: {
    resource: {
      id: databaseName
    }
    // Shared throughput keeps the provisioned minimum at one autoscale budget for all containers:
    // none of them sets its own, so the inbox and leases containers need no capacity handling.
    options: serverless ? {} : { autoscaleSettings: { maxThroughput: autoscaleMaxThroughput } }
  }
}

// One logical partition per order: the order document and its line documents share
// partition key /orderId so they are written in ONE transactional batch.
resource ordersContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = {
  parent: database
  name: ordersContainerName
  properties: {
    resource: {
      id: ordersContainerName
      partitionKey: {
        paths: ['/orderId']
        kind: 'Hash'
        version: 2
      }
      // TTL on, no default expiry: orders live forever unless an item sets its own ttl.
      defaultTtl: -1
      // Batch creates and point reads need no index. The queries (an order's documents, the
      // verifier's STARTSWITH(c.orderId, ...)) filter on orderId; `type` tells order and line
      // documents apart. Nothing else is indexed, so writes stay cheap: a query that filters or
      // sorts on another path needs it added here.
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          { path: '/orderId/?' }
          { path: '/type/?' }
        ]
        excludedPaths: [
          { path: '/*' }
        ]
      }
    }
  }
}

// Idempotency-Key records of the HTTP API: id = caller scope + key, each with its own ttl (24 h by
// default). Claims, replays and completions are point operations by id; the one query (GET of an
// order that is not stored yet, src/orders/adapters/cosmos_idempotency.py) filters on type,
// orderId, scope and status, so exactly those paths are indexed.
resource idempotencyContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = {
  parent: database
  name: idempotencyContainerName
  properties: {
    resource: {
      id: idempotencyContainerName
      partitionKey: {
        paths: ['/id']
        kind: 'Hash'
        version: 2
      }
      // Must be set (-1) for the per-item ttl of the records to take effect.
      defaultTtl: -1
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          { path: '/type/?' }
          { path: '/orderId/?' }
          { path: '/scope/?' }
          { path: '/status/?' }
        ]
        excludedPaths: [
          { path: '/*' }
        ]
      }
    }
  }
}

// The fan-out consumers' records, in the order's partition: shipping's inbox record and its
// shipment in one transactional batch, billing's two-phase record `billing:<messageId>`. Reads
// are by id (`SELECT ... WHERE c.id = @id` with the database's clock; id is always indexed) and
// the verifier's STARTSWITH(c.orderId, ...), so only orderId is indexed. TTL on, no default
// expiry: the records carry their own ttl (past every redelivery of their message, from the
// entities' settings: ORDERS_LOCK_DURATION_SECONDS and its two siblings); shipments carry none.
resource inboxContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = {
  parent: database
  name: inboxContainerName
  properties: {
    resource: {
      id: inboxContainerName
      partitionKey: {
        paths: ['/orderId']
        kind: 'Hash'
        version: 2
      }
      // Must be set (-1) for the per-item ttl of the records to take effect.
      defaultTtl: -1
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          { path: '/orderId/?' }
        ]
        excludedPaths: [
          { path: '/*' }
        ]
      }
    }
  }
}

// Checkpoints of the change feed on `orders`: the Functions Cosmos DB trigger's leases (it requires
// partition key /id and, with managed identity, cannot create this container itself:
// create_lease_container_if_not_exists is false) and the local `orders dispatcher`'s lease
// documents. The trigger's lease store queries its own documents, so the default index-everything
// policy stays: lease documents are few and small, there is nothing to save by trimming.
resource leasesContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = {
  parent: database
  name: leasesContainerName
  properties: {
    resource: {
      id: leasesContainerName
      partitionKey: {
        paths: ['/id']
        kind: 'Hash'
        version: 2
      }
    }
  }
}

output accountName string = account.name
output endpoint string = account.properties.documentEndpoint
output databaseName string = database.name
output ordersContainerName string = ordersContainer.name
output idempotencyContainerName string = idempotencyContainer.name
output inboxContainerName string = inboxContainer.name
output leasesContainerName string = leasesContainer.name
