// Entry point for `azd up`: creates the resource group and wires one module per concern.
// Every name comes from abbreviations.json plus a token that is stable for one azd environment
// in one subscription and region, so re-running `azd up` updates instead of duplicating.
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('azd environment name; part of every resource name and the azd-env-name tag.')
param environmentName string

@minLength(1)
@description('Azure region for every resource.')
param location string

@description('Object id of the deploying user or service principal (azd sets AZURE_PRINCIPAL_ID). Gets data-plane access only with allowUserIdentityPrincipal.')
param principalId string = ''

@description('Grant principalId data-plane access (Service Bus queue, Cosmos DB, telemetry) so `orders load` / `orders verify` run from a laptop. Off by default, as in the official azd templates.')
param allowUserIdentityPrincipal bool = false

@description('Grant principalId Service Bus Data Receiver on the subscriptions, for `orders dlq` on billing\'s and shipping\'s dead letters. It can take and complete live events too (Service Bus RBAC cannot scope to a dead-letter sub-queue), so it is off by default and apart from allowUserIdentityPrincipal.')
param allowUserSubscriptionDeadLetters bool = false

@allowed(['User', 'ServicePrincipal'])
@description('Kind of principalId: User for a person, ServicePrincipal for a CI pipeline.')
param principalType string = 'User'

@description('Resource group name; empty: rg-<environmentName>.')
param resourceGroupName string = ''

// Basic is not offered: it has no duplicate detection, which this design relies on.
@allowed(['Standard', 'Premium'])
@description('Service Bus tier; choose it before the first `azd up` (changing tiers later is a namespace migration). Premium adds isolation, predictable latency and private endpoints.')
param serviceBusSku string = 'Standard'

@description('How long the broker remembers a MessageId (ISO 8601, PT20S..P7D). A producer retry inside this window is dropped by the broker; one after it reaches the idempotent consumer.')
param duplicateDetectionHistoryTimeWindow string = 'PT10M'

@minValue(1)
@maxValue(2000)
@description('Deliveries before the broker dead-letters a message with MaxDeliveryCountExceeded.')
param maxDeliveryCount int = 10

@description('Time a message may wait in the queue before it expires into the dead-letter queue (ISO 8601).')
param messageTimeToLive string = 'P14D'

@allowed(['Serverless', 'Provisioned'])
@description('Cosmos DB capacity mode. Provisioned uses shared autoscale throughput on the database.')
param cosmosCapacityMode string = 'Serverless'

@minValue(1000)
@description('Autoscale maximum RU/s shared by both containers (Provisioned mode only).')
param cosmosAutoscaleMaxThroughput int = 1000

@allowed(['3.11', '3.12'])
@description('Python version of the Flex Consumption runtime.')
param pythonVersion string = '3.11'

@minValue(40)
@maxValue(1000)
@description('Flex Consumption scale-out limit; size it with host.json maxConcurrentCalls against the Cosmos DB RU budget (infra/README.md, "Sizing").')
param maximumInstanceCount int = 40

@allowed([512, 2048, 4096])
@description('Memory per Flex Consumption instance.')
param instanceMemoryMB int = 2048

@description('E-mail address for the dead-letter alert; empty: the alert fires in the portal only.')
param alertEmailAddress string = ''

@description('Private networking: VNet integration and private endpoints for storage, Cosmos DB and (Premium only) Service Bus; public access to them is then off. Off by default.')
param vnetEnabled bool = false

@description('Client id of an Entra app registration for App Service authentication of the HTTP API; empty: function keys only.')
param authClientId string = ''

@description('Token audience the HTTP API accepts; empty: api://<authClientId>.')
param authAudience string = ''

@description('Base URL of the payment service billing charges through (it must honour Idempotency-Key; see src/payments_standin/README.md); empty: not configured.')
param paymentsUrl string = ''

@description('From when billing and shipping refuse an event published under its bare eventId (before the MessageId nonce): an ISO 8601 time with its offset, e.g. 2026-12-31T00:00:00Z; empty: still accepted. Set it once every event published before the nonce has been consumed (docs/operations.md).')
param bareEventIdCutover string = ''

@description('Status updates through the session queue `order-status-sessions` (SessionId = orderId: strict FIFO per order, one consumer per order at a time) instead of the plain `order-status` (versions decide, any order). Both queues always exist, so this is a setting, not a migration.')
param statusSessions bool = false

// The duplicate-detection window in whole seconds, as the tools read it
// (ORDERS_DUPLICATE_WINDOW_SECONDS: `orders load`, `orders dlq resubmit`, the console): the
// ISO 8601 duration added to the epoch, so any form the entities accept (PT10M, PT1H30M, P7D)
// converts, and one parameter sets both the entities and the setting.
var duplicateWindowSeconds = dateTimeToEpoch(dateTimeAdd('1970-01-01T00:00:00Z', duplicateDetectionHistoryTimeWindow))
// The message TTL in whole seconds, the same way: with the lock duration and maxDeliveryCount the
// entities get, it sizes how long the app keeps its exactly-once records (their per-item ttl).
var messageTimeToLiveSeconds = dateTimeToEpoch(dateTimeAdd('1970-01-01T00:00:00Z', messageTimeToLive))
// Billing charges through PAYMENTS_URL; without one every billing delivery would fail to build
// its runtime, be abandoned ten times and dead-letter. So an empty paymentsUrl deploys
// `bill_order` disabled on purpose (the app setting AzureWebJobs.bill_order.Disabled) and says so
// in the outputs; `azd env set PAYMENTS_URL ...` then `azd provision` turns it on.
var billingEnabled = !empty(paymentsUrl)

var abbrs = loadJsonContent('abbreviations.json')
var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = { 'azd-env-name': environmentName }

// Names the app reads through its settings; they are fixed by the code's defaults, so they are
// variables, not parameters.
var queueName = 'orders'
var orderEventsTopicName = 'order-events'
// One subscription of the events topic per consumer the app registers on it
// (src/orders/service/registry.py): `name` is the subscription, `setting` the app setting that
// names it (`<NAME>_SUBSCRIPTION`). The subscriptions, their roles, the function app's settings
// and the outputs are all derived from this array: a new consumer is one more element.
var consumerSubscriptions = [
  { name: 'billing', setting: 'BILLING_SUBSCRIPTION' }
  { name: 'shipping', setting: 'SHIPPING_SUBSCRIPTION' }
]
var statusQueueName = 'order-status'
var statusSessionsQueueName = 'order-status-sessions'
var cosmosDatabaseName = 'orders'
var cosmosOrdersContainerName = 'orders'
var cosmosIdempotencyContainerName = 'idempotency'
var cosmosInboxContainerName = 'inbox'
var cosmosLeasesContainerName = 'leases'
// The status queue the app uses: the session one in the sessions mode.
var appStatusQueueName = statusSessions ? messaging.outputs.statusSessionsQueueName : messaging.outputs.statusQueueName
var deploymentContainerName = 'app-package-${resourceToken}'

// With vnetEnabled the services behind private endpoints refuse public traffic. Standard Service
// Bus has no private endpoints, so it stays public (still Entra-only) unless the tier is Premium.
var privateServiceBus = vnetEnabled && serviceBusSku == 'Premium'
var dataPublicNetworkAccess = vnetEnabled ? 'Disabled' : 'Enabled'

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: !empty(resourceGroupName) ? resourceGroupName : '${abbrs.resourcesResourceGroups}${environmentName}'
  location: location
  tags: tags
}

module identity 'modules/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: '${abbrs.managedIdentityUserAssignedIdentities}api-${resourceToken}'
    location: location
    tags: tags
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: '${abbrs.operationalInsightsWorkspaces}${resourceToken}'
    applicationInsightsName: '${abbrs.insightsComponents}${resourceToken}'
    location: location
    tags: tags
  }
}

module messaging 'modules/messaging.bicep' = {
  name: 'messaging'
  scope: rg
  params: {
    namespaceName: '${abbrs.serviceBusNamespaces}${resourceToken}'
    location: location
    tags: tags
    skuName: serviceBusSku
    queueName: queueName
    topicName: orderEventsTopicName
    subscriptions: consumerSubscriptions
    statusQueueName: statusQueueName
    statusSessionsQueueName: statusSessionsQueueName
    duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
    maxDeliveryCount: maxDeliveryCount
    messageTimeToLive: messageTimeToLive
    publicNetworkAccess: privateServiceBus ? 'Disabled' : 'Enabled'
  }
}

module database 'modules/database.bicep' = {
  name: 'database'
  scope: rg
  params: {
    accountName: '${abbrs.documentDBDatabaseAccounts}${resourceToken}'
    location: location
    tags: tags
    capacityMode: cosmosCapacityMode
    autoscaleMaxThroughput: cosmosAutoscaleMaxThroughput
    databaseName: cosmosDatabaseName
    ordersContainerName: cosmosOrdersContainerName
    idempotencyContainerName: cosmosIdempotencyContainerName
    inboxContainerName: cosmosInboxContainerName
    leasesContainerName: cosmosLeasesContainerName
    publicNetworkAccess: dataPublicNetworkAccess
  }
}

module storage 'modules/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: '${abbrs.storageStorageAccounts}${resourceToken}'
    location: location
    tags: tags
    deploymentContainerName: deploymentContainerName
    publicNetworkAccess: dataPublicNetworkAccess
  }
}

module network 'modules/network.bicep' = if (vnetEnabled) {
  name: 'network'
  scope: rg
  params: {
    vnetName: '${abbrs.networkVirtualNetworks}${resourceToken}'
    location: location
    tags: tags
    storageAccountName: storage.outputs.name
    cosmosAccountName: database.outputs.accountName
    serviceBusNamespaceName: messaging.outputs.namespaceName
    serviceBusPrivateEndpoint: privateServiceBus
    cosmosEndpoint: database.outputs.endpoint
    serviceBusFullyQualifiedNamespace: messaging.outputs.fullyQualifiedNamespace
  }
}

module roles 'modules/roles.bicep' = {
  name: 'roles'
  scope: rg
  // With vnetEnabled, `network` adds a private endpoint to the Cosmos DB account while this module
  // writes its role assignments; Cosmos DB refuses a second concurrent operation on one account
  // ("another operation is in progress"), so the grants wait for the network. Without
  // vnetEnabled the module does not exist and the dependency is void.
  dependsOn: [network]
  params: {
    appPrincipalId: identity.outputs.principalId
    userPrincipalId: principalId
    userPrincipalType: principalType
    allowUserIdentityPrincipal: allowUserIdentityPrincipal
    allowUserSubscriptionDeadLetters: allowUserSubscriptionDeadLetters
    serviceBusNamespaceName: messaging.outputs.namespaceName
    queueName: messaging.outputs.queueName
    topicName: messaging.outputs.topicName
    subscriptions: consumerSubscriptions
    statusQueueName: messaging.outputs.statusQueueName
    statusSessionsQueueName: messaging.outputs.statusSessionsQueueName
    cosmosAccountName: database.outputs.accountName
    cosmosDatabaseName: database.outputs.databaseName
    storageAccountName: storage.outputs.name
    applicationInsightsName: monitoring.outputs.applicationInsightsName
  }
}

module functionApp 'modules/functionapp.bicep' = {
  name: 'functionapp'
  scope: rg
  // The host starts as soon as the site exists; granting its roles first spares it a burst of
  // 403s on storage, Service Bus and Cosmos right after the first deployment.
  dependsOn: [roles]
  params: {
    name: '${abbrs.webSitesFunctions}api-${resourceToken}'
    planName: '${abbrs.webServerFarms}${resourceToken}'
    location: location
    tags: tags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageBlobEndpoint: storage.outputs.blobEndpoint
    deploymentContainerName: storage.outputs.deploymentContainerName
    applicationInsightsConnectionString: monitoring.outputs.applicationInsightsConnectionString
    serviceBusFullyQualifiedNamespace: messaging.outputs.fullyQualifiedNamespace
    queueName: messaging.outputs.queueName
    orderEventsTopicName: messaging.outputs.topicName
    subscriptions: consumerSubscriptions
    statusQueueName: appStatusQueueName
    statusSessions: statusSessions
    cosmosEndpoint: database.outputs.endpoint
    cosmosDatabaseName: database.outputs.databaseName
    cosmosOrdersContainerName: database.outputs.ordersContainerName
    cosmosIdempotencyContainerName: database.outputs.idempotencyContainerName
    cosmosInboxContainerName: database.outputs.inboxContainerName
    cosmosLeasesContainerName: database.outputs.leasesContainerName
    pythonVersion: pythonVersion
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    virtualNetworkSubnetId: vnetEnabled ? network.outputs.appSubnetId : ''
    authClientId: authClientId
    authAudience: authAudience
    paymentsUrl: paymentsUrl
    bareEventIdCutover: bareEventIdCutover
    billingEnabled: billingEnabled
    duplicateWindowSeconds: duplicateWindowSeconds
    lockDurationSeconds: messaging.outputs.lockDurationSeconds
    maxDeliveryCount: maxDeliveryCount
    messageTimeToLiveSeconds: messageTimeToLiveSeconds
  }
}

module dashboards 'modules/dashboards.bicep' = {
  name: 'dashboards'
  scope: rg
  params: {
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    location: location
    tags: tags
    mismatchAlertName: '${abbrs.insightsScheduledQueryRules}mismatches-${resourceToken}'
    duplicateAlertName: '${abbrs.insightsScheduledQueryRules}duplicates-${resourceToken}'
    alertLinesAlertName: '${abbrs.insightsScheduledQueryRules}alert-lines-${resourceToken}'
    dispatcherFailuresAlertName: '${abbrs.insightsScheduledQueryRules}dispatcher-failures-${resourceToken}'
    dispatcherLagAlertName: '${abbrs.insightsScheduledQueryRules}dispatcher-lag-${resourceToken}'
    actionGroupName: '${abbrs.insightsActionGroups}${resourceToken}'
    notify: !empty(alertEmailAddress)
  }
  // The alerts point at the dead-letter alert's action group.
  dependsOn: [alerts]
}

module alerts 'modules/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  params: {
    alertName: '${abbrs.insightsMetricAlerts}dead-letters-${resourceToken}'
    actionGroupName: '${abbrs.insightsActionGroups}${resourceToken}'
    tags: tags
    serviceBusNamespaceName: messaging.outputs.namespaceName
    queueName: messaging.outputs.queueName
    topicName: messaging.outputs.topicName
    statusQueueName: messaging.outputs.statusQueueName
    statusSessionsQueueName: messaging.outputs.statusSessionsQueueName
    alertEmailAddress: alertEmailAddress
  }
}

// azd stores every output in the environment (`azd env get-values`). The names are the settings
// the app reads wherever they are plain upper-case names; the Service Bus namespace gets the
// conventional AZURE_ name because `ServiceBusConnection__fullyQualifiedNamespace` is
// mixed-case, which azd does not keep reliably. AZURE_CLIENT_ID is deliberately NOT an output:
// on a laptop it would point DefaultAzureCredential at the function's managed identity.
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_SERVICEBUS_NAMESPACE string = messaging.outputs.namespaceName
output AZURE_SERVICEBUS_FULLY_QUALIFIED_NAMESPACE string = messaging.outputs.fullyQualifiedNamespace
output ORDERS_QUEUE string = messaging.outputs.queueName
output COSMOS_ENDPOINT string = database.outputs.endpoint
output COSMOS_DATABASE string = database.outputs.databaseName
output COSMOS_CONTAINER string = database.outputs.ordersContainerName
output COSMOS_IDEMPOTENCY_CONTAINER string = database.outputs.idempotencyContainerName
output COSMOS_INBOX_CONTAINER string = database.outputs.inboxContainerName
output COSMOS_LEASES_CONTAINER string = database.outputs.leasesContainerName
output ORDER_EVENTS_TOPIC string = messaging.outputs.topicName
// Every consumer's subscription as { name, setting } (azd keeps an array output as JSON); the
// postprovision hook writes each as its setting. Outputs cannot be named in a loop, so the
// array is one output.
output ORDER_EVENTS_SUBSCRIPTIONS array = messaging.outputs.subscriptions
output STATUS_QUEUE string = appStatusQueueName
// A string, exactly as the app setting reads it.
output STATUS_SESSIONS string = statusSessions ? 'true' : 'false'
// The broker's duplicate-detection window in seconds, as the app setting of the same name: the
// laptop tools (`orders load`, `orders dlq resubmit`) read it from the azd environment.
output ORDERS_DUPLICATE_WINDOW_SECONDS string = string(duplicateWindowSeconds)
// Whether billing runs ('true') or was deployed disabled for want of PAYMENTS_URL ('false');
// the postprovision hook prints what to do about it.
output BILLING_ENABLED string = billingEnabled ? 'true' : 'false'
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
output AZURE_FUNCTION_APP_URL string = functionApp.outputs.url
output AZURE_FUNCTION_IDENTITY_CLIENT_ID string = identity.outputs.clientId
output APPLICATIONINSIGHTS_CONNECTION_STRING string = monitoring.outputs.applicationInsightsConnectionString
// The audience a caller asks Entra ID for when App Service authentication is on; empty when off.
output AZURE_FUNCTION_AUTH_AUDIENCE string = functionApp.outputs.authAudience
