// Service Bus namespace, the `orders` queue, the fan-out topic `order-events` with one
// subscription per element of `subscriptions` (one per consumer), and the status queues (`order-status`, and
// `order-status-sessions` for the sessions mode). The broker's duplicate detection is the first
// line of defence (producer retries inside the window never reach a consumer); the idempotent
// consumer is the second (late duplicates, redeliveries). Both are needed.
param namespaceName string
param location string
param tags object = {}

// Basic has no duplicate detection, so it is not allowed. Choose before the first `azd up`:
// moving a namespace between tiers is a migration, not a property change.
@allowed(['Standard', 'Premium'])
param skuName string = 'Standard'

@allowed(['Enabled', 'Disabled'])
@description('Disabled only with a private endpoint (vnetEnabled on Premium).')
param publicNetworkAccess string = 'Enabled'

param queueName string = 'orders'
param topicName string = 'order-events'
@description('One subscription of the topic per consumer: { name, setting } (consumerSubscriptions in main.bicep).')
param subscriptions array
param statusQueueName string = 'order-status'
param statusSessionsQueueName string = 'order-status-sessions'

@description('ISO 8601, PT20S..P7D. Fixed at entity creation together with requiresDuplicateDetection; the queues and the topic share it.')
param duplicateDetectionHistoryTimeWindow string = 'PT10M'

@minValue(1)
@maxValue(2000)
param maxDeliveryCount int = 10

param messageTimeToLive string = 'P14D'

// lockDuration is sized against the worst case of ONE invocation of the order function
// (see the consumer design in the README):
//   - validation + RFC 8785 hash: milliseconds;
//   - a new order is ONE Cosmos request, a transactional batch, which Cosmos executes in at most
//     5 s; a duplicate adds one point read after the 409;
//   - under throttling the Cosmos SDK retries 429s for at most 30 s per request (azure-cosmos
//     RetryOptions.MaxWaitTimeInSeconds default) and then raises, and the function abandons;
//   - settlement is one call to the host, well under a second.
// Worst case that still ends in a settlement: 5 s + 30 s (batch) + 30 s (point read) + ~1 s,
// about 66 s. PT2M holds that with margin even if the host's automatic renewal
// (host.json maxAutoLockRenewalDuration) is late or fails once. It cannot cover prefetched
// messages (their locks run unrenewed in the host's buffer while every call may back off for
// 180 s), so host.json's prefetchCount is 0 (tests/infra/test_host_budgets.py). Longer
// tails (a TCP connection stalled until the SDK's 65 s read timeout) are left to that renewal.
// The cost of a longer lock is recovery latency only: a message held by a crashed instance
// reappears after at most 2 minutes and is then processed idempotently. The service maximum is
// PT5M. emulators/servicebus/config.json (the official emulator, for Docker users) uses PT1M,
// inside that emulator's PT5S..PT5M range; the demo and the tests build their own queues with
// shorter locks (the demo PT30S) so their crash drills redeliver sooner.
var lockDuration = 'PT2M'

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  tags: tags
  // Premium is sold in messaging units; Standard takes no capacity.
  sku: skuName == 'Premium' ? { name: 'Premium', tier: 'Premium', capacity: 1 } : { name: 'Standard', tier: 'Standard' }
  properties: {
    // Entra ID only: SAS keys and connection strings are refused.
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
  }
}

// The entities are top-level resources with `parent`, not nested ones: the tests' Bicep parser
// (pycep) keeps only the last nested child of a resource, so nesting would hide all but one.
resource queue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = {
  parent: namespace
  name: queueName
  properties: {
    // Cannot be switched on or off once the queue exists (see infra/README.md).
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
    maxDeliveryCount: maxDeliveryCount
    lockDuration: lockDuration
    // An order that nobody processed in time must land in the dead-letter queue (and fire the
    // dead-letter alert) instead of vanishing.
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: messageTimeToLive
    requiresSession: false
    // Express entities may keep messages in memory only; an accepted order must be durable.
    enableExpress: false
    enablePartitioning: false
    enableBatchedOperations: true
    maxSizeInMegabytes: 1024
  }
}

// The dispatcher publishes each outbox document with MessageId = the outbox document's id, so a
// re-publish after a crash between publish and mark is dropped here inside the window; one after
// it reaches the subscribers' own dedup (billing's two phases, shipping's inbox). The topic's TTL
// applies to every subscription too: a message expires at the smaller of the two.
resource topic 'Microsoft.ServiceBus/namespaces/topics@2024-01-01' = {
  parent: namespace
  name: topicName
  properties: {
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
    defaultMessageTimeToLive: messageTimeToLive
    supportOrdering: false
    enableExpress: false
    enablePartitioning: false
    enableBatchedOperations: true
    maxSizeInMegabytes: 1024
  }
}

// Each subscription is one consumer's own copy of every event, settled in PeekLock with the
// queue's settings. Shipping's worst case is the order function's (one batch). Billing's is
// longer: up to 30 s waiting on another owner's live lease, a payment call of at most 10 s and
// two conditional writes (each up to 30 s of 429 retries); the host renews the lock meanwhile
// (host.json maxAutoLockRenewalDuration, 5 min), and if it is lost anyway the record's lease
// keeps a second delivery from charging twice. Dead-lettering on expiry as on the queue.
resource consumerSubscriptions 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2024-01-01' = [for consumer in subscriptions: {
  parent: topic
  name: consumer.name
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: messageTimeToLive
    requiresSession: false
    enableBatchedOperations: true
  }
}]

// A delayed retry (exactly_once.delayed_retries) is a copy scheduled on the topic, which would
// reach every subscription; it names the one it is for. Each subscription's default rule (a
// TrueFilter) is replaced by this filter, so the others never receive it (their consumers would
// complete it as `not_ours` anyway). The expression is `subscription_filter` in that module;
// scripts/derived_config.py gives the emulator config the same rule.
resource consumerSubscriptionRules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2024-01-01' = [for (consumer, i) in subscriptions: {
  parent: consumerSubscriptions[i]
  name: '$Default'
  properties: {
    filterType: 'SqlFilter'
    sqlFilter: {
      sqlExpression: 'ExactlyOnceSubscription IS NULL OR ExactlyOnceSubscription = \'${consumer.name}\''
    }
  }
}]

// Status updates (OrderStatusChanged) carry the absolute state and a version, so the plain queue
// needs no ordering; duplicate detection still drops a producer's retries inside the window.
resource statusQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = {
  parent: namespace
  name: statusQueueName
  properties: {
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
    maxDeliveryCount: maxDeliveryCount
    lockDuration: lockDuration
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: messageTimeToLive
    requiresSession: false
    enableExpress: false
    enablePartitioning: false
    enableBatchedOperations: true
    maxSizeInMegabytes: 1024
  }
}

// The sessions mode (statusSessions): SessionId = orderId gives strict FIFO per order, one
// consumer per order at a time. Both queues exist so the mode is a setting, not a redeployment:
// requiresSession is fixed at queue creation.
resource statusSessionsQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = {
  parent: namespace
  name: statusSessionsQueueName
  properties: {
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionHistoryTimeWindow
    maxDeliveryCount: maxDeliveryCount
    lockDuration: lockDuration
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: messageTimeToLive
    requiresSession: true
    enableExpress: false
    enablePartitioning: false
    enableBatchedOperations: true
    maxSizeInMegabytes: 1024
  }
}

output namespaceName string = namespace.name
output namespaceId string = namespace.id
// serviceBusEndpoint is https://<name>.servicebus.windows.net:443/ (or the sovereign-cloud
// equivalent); the SDKs and the trigger want the bare host name.
output fullyQualifiedNamespace string = split(replace(namespace.properties.serviceBusEndpoint, 'https://', ''), ':')[0]
output queueName string = queue.name
output queueId string = queue.id
output topicName string = topic.name
output subscriptions array = [for (consumer, i) in subscriptions: { name: consumerSubscriptions[i].name, setting: consumer.setting }]
output statusQueueName string = statusQueue.name
output statusSessionsQueueName string = statusSessionsQueue.name
// The lock every entity gets, in whole seconds: the app's record retention (lock duration x
// maxDeliveryCount + message TTL + a margin, ORDERS_LOCK_DURATION_SECONDS) is sized from it.
output lockDurationSeconds int = dateTimeToEpoch(dateTimeAdd('1970-01-01T00:00:00Z', lockDuration))
