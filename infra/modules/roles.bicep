// Every data-plane grant of the deployment, in one place so least privilege can be reviewed at a
// glance. There are no keys anywhere: Service Bus, Cosmos DB, Application Insights and the
// storage account all refuse local auth, so these assignments are the only way in.
//
//   principal      | Service Bus                                | Cosmos DB (account) | Storage (account) | App Insights
//   function (app) | queue `orders`: Data Owner                 | Data Contributor    | Blob Data Owner   | Metrics Publisher
//                  | topic order-events: Data Owner             |                     |                   |
//                  | status queues: Data Owner                  |                     |                   |
//   deploying user | queue `orders`: Receiver + Sender          | Data Contributor    | -                 | Metrics Publisher
//                  | status queues: Receiver + Sender           |                     |                   |
//   (its own opt-in) subscriptions: Receiver                    | -                   | -                 | -
//
// Every Service Bus grant is scoped to one entity (a queue's scope includes its dead-letter
// sub-queue, a topic's its subscriptions and theirs); nothing is namespace-wide.
//
// The function needs Data Owner, not Receiver + Sender (which Owner includes), wherever a trigger
// listens, because the Service Bus trigger's target-based scaler reads the entity's message count,
// a Manage operation; with Listen rights only it falls back to a less accurate, incremental
// estimate (azure-functions-host#8892, and the official functions-quickstart-python-azd-service-bus
// template grants Data Owner). For a topic trigger the scaler reads the TOPIC's metrics, so the
// fan-out's grant is at topic scope (it covers both subscriptions and the dispatcher's publish).
// Each grant is scoped to one entity: the queue `orders`, the topic `order-events`, and both
// status queues (STATUS_SESSIONS switches between them without a redeployment), so the identity
// can manage nothing else on the namespace.
//
// Cosmos DB: one account-scoped Data Contributor covers every container of database.bicep,
// including `inbox` and `leases`. The Functions Cosmos DB trigger with a managed identity needs
// exactly this built-in role on the monitored container (`orders`: change feed reads) and on the
// lease container (`leases`: create, read, replace, delete of its leases), so no new assignment
// is needed (and none would be allowed to run concurrently with these two, see below).
//
// The deploying user's grants are opt-in (allowUserIdentityPrincipal, as in the official azd
// templates): they let `orders load` / `orders verify`, the dead-letter tools on the queues
// (`orders dlq`) and telemetry export run from a laptop.
//
// Receiver on the subscriptions is an opt-in of its own (allowUserSubscriptionDeadLetters), for
// the time an operator works through billing's or shipping's dead letters. Service Bus RBAC
// cannot narrow it: a subscription's dead-letter sub-queue is no resource a role can be scoped
// to, and peeking is the same data action as receiving, so the dead-letter tools' grant also
// takes and completes live events, which billing or shipping then never see. Laptop tooling
// never needs it, so it no longer comes with allowUserIdentityPrincipal (docs/security.md).
param appPrincipalId string

@description('Deploying user or CI principal; empty: no user grants.')
param userPrincipalId string = ''

@allowed(['User', 'ServicePrincipal'])
param userPrincipalType string = 'User'

@description('Grant userPrincipalId data-plane access (laptop tooling). Off by default.')
param allowUserIdentityPrincipal bool = false

@description('Grant userPrincipalId Receiver on the subscriptions, for `orders dlq` on their dead letters: it can take live events too (no narrower role exists). Off by default; independent of allowUserIdentityPrincipal.')
param allowUserSubscriptionDeadLetters bool = false

param serviceBusNamespaceName string
param queueName string
param topicName string
@description('The subscriptions of the consumers of the topic: { name, setting } (main.bicep).')
param subscriptions array
param statusQueueName string
param statusSessionsQueueName string
param cosmosAccountName string
param cosmosDatabaseName string
param storageAccountName string
param applicationInsightsName string

// Built-in role definition ids (Azure RBAC).
var serviceBusDataOwner = '090c5cfd-751d-490a-894a-3ce6f1109419'
var serviceBusDataReceiver = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
var serviceBusDataSender = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
var storageBlobDataOwner = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'
// Cosmos DB data plane has its own RBAC: Cosmos DB Built-in Data Contributor.
var cosmosDataContributor = '00000000-0000-0000-0000-000000000002'

var grantUser = allowUserIdentityPrincipal && !empty(userPrincipalId)
var grantUserSubscriptions = allowUserSubscriptionDeadLetters && !empty(userPrincipalId)

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName

  resource queue 'queues' existing = {
    name: queueName
  }
}

// Separate `existing` declarations rather than more nested ones: the tests' Bicep parser keeps
// only the last nested child of a resource.
resource topic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' existing = {
  parent: namespace
  name: topicName
}

resource consumerSubscriptions 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' existing = [for consumer in subscriptions: {
  parent: topic
  name: consumer.name
}]

resource statusQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: namespace
  name: statusQueueName
}

resource statusSessionsQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: namespace
  name: statusSessionsQueueName
}

resource cosmosAccount 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' existing = {
  name: cosmosAccountName
}

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// --- the function app's managed identity -------------------------------------------------------

// Scoped to the queue, not the namespace: the identity can touch nothing else on the broker.
// The queue scope includes its dead-letter sub-queue. Owner = send + receive + manage (the
// scaler's message count); see the header.
resource appQueueOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(namespace::queue.id, appPrincipalId, serviceBusDataOwner)
  scope: namespace::queue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Fan-out: Data Owner at TOPIC scope. The billing and shipping triggers' target-based scaler reads
// the topic's metrics (GetTopicAsync, a Manage operation that needs the topic scope: Owner on a
// subscription alone is not enough), and the topic scope covers both subscriptions (receive,
// settle, dead-letter) and the outbox dispatcher's publish. Without it both triggers fall back to
// incremental scaling, and billing, the slowest consumer, is the one throttled.
// It is the only send right on the topic: nobody else is granted Data Sender or Owner there or
// on the namespace (the user gets Receiver on the subscriptions only), so only the dispatcher
// publishes order events (docs/fanout.md, "Who may send to the topic and the subscriptions").
resource appTopicOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(topic.id, appPrincipalId, serviceBusDataOwner)
  scope: topic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Status updates: billing, shipping and the HTTP cancel send them; the status consumer's trigger
// receives them and its scaler reads the queue's message count (Manage), so Data Owner on each
// status queue, as on `orders`. Both queues: STATUS_SESSIONS switches between them.
resource appStatusOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(statusQueue.id, appPrincipalId, serviceBusDataOwner)
  scope: statusQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource appStatusSessionsOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(statusSessionsQueue.id, appPrincipalId, serviceBusDataOwner)
  scope: statusSessionsQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Account scope: it is the scope Microsoft's samples use (the SDK reads account metadata when it
// starts), and the account holds nothing but this template's database. It therefore covers all
// four containers, the Cosmos DB trigger's monitored `orders` and its lease container `leases`
// included.
resource appCosmosDataContributor 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-11-15' = {
  parent: cosmosAccount
  name: guid(cosmosAccount.id, appPrincipalId, cosmosDataContributor)
  properties: {
    roleDefinitionId: '${cosmosAccount.id}/sqlRoleDefinitions/${cosmosDataContributor}'
    principalId: appPrincipalId
    scope: cosmosAccount.id
  }
}

// Flex Consumption reads the deployment package and the host keeps its leases and keys here.
resource appStorageBlobOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, storageBlobDataOwner)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Application Insights with local auth off accepts telemetry only with this role.
resource appMetricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(applicationInsights.id, appPrincipalId, monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// --- the deploying user (laptop tooling) ----------------------------------------------------

resource userQueueReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(namespace::queue.id, userPrincipalId, serviceBusDataReceiver)
  scope: namespace::queue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

resource userQueueSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(namespace::queue.id, userPrincipalId, serviceBusDataSender)
  scope: namespace::queue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

// `orders dlq` on the subscriptions (browse, purge; resubmitting to a topic is refused by the tool),
// on its own opt-in: see the header. One per subscription, with the name (a guid of the
// subscription's id) each had when they were declared one by one, so existing assignments are
// kept. Switching the opt-in off does not delete them (ARM never deletes): infra/README.md.
resource userSubscriptionReceivers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (consumer, i) in (grantUserSubscriptions ? subscriptions : []): {
  name: guid(consumerSubscriptions[i].id, userPrincipalId, serviceBusDataReceiver)
  scope: consumerSubscriptions[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}]

// `orders dlq` (resubmit included) on the status queues, and status updates sent from a laptop.
resource userStatusReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(statusQueue.id, userPrincipalId, serviceBusDataReceiver)
  scope: statusQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

resource userStatusSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(statusQueue.id, userPrincipalId, serviceBusDataSender)
  scope: statusQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

resource userStatusSessionsReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(statusSessionsQueue.id, userPrincipalId, serviceBusDataReceiver)
  scope: statusSessionsQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

resource userStatusSessionsSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(statusSessionsQueue.id, userPrincipalId, serviceBusDataSender)
  scope: statusSessionsQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

// Cosmos DB refuses concurrent changes to one account's role assignments ("another operation in
// progress"), so the second assignment waits for the first instead of racing it.
resource userCosmosDataContributor 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-11-15' = if (grantUser) {
  parent: cosmosAccount
  dependsOn: [appCosmosDataContributor]
  name: guid(cosmosAccount.id, userPrincipalId, cosmosDataContributor)
  properties: {
    roleDefinitionId: '${cosmosAccount.id}/sqlRoleDefinitions/${cosmosDataContributor}'
    principalId: userPrincipalId
    scope: cosmosAccount.id
  }
}

resource userMetricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(applicationInsights.id, userPrincipalId, monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}
