// A message in a dead-letter queue is one the system refused on purpose (a payload that reuses an
// orderId with different content, poison, an expired message, a payment the provider refused for
// good, an illegal status transition) or gave up on after maxDeliveryCount. None of them may go
// unnoticed, so any dead-lettered message on any entity raises an alert.
//
// Azure Monitor reports DeadletteredMessages per queue and per TOPIC (EntityName), not per
// subscription: the topic's series is the sum of its subscriptions' dead letters (one per
// consumer, main.bicep's consumerSubscriptions: a new one is watched without a change here), and
// `orders dlq list --topic order-events --subscription <name>` tells them apart. One alert watches every entity; each EntityName is its own time series, so the
// alert fires (and resolves) per entity and names it.
param alertName string
param actionGroupName string
param tags object = {}
param serviceBusNamespaceName string
param queueName string
param topicName string
param statusQueueName string
param statusSessionsQueueName string

@description('E-mail address notified by the alert; empty: the alert only shows in the portal.')
param alertEmailAddress string = ''

var notify = !empty(alertEmailAddress)

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (notify) {
  name: actionGroupName
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'orders-dlq'
    enabled: true
    emailReceivers: [
      {
        name: 'operator'
        emailAddress: alertEmailAddress
        useCommonAlertSchema: true
      }
    ]
  }
}

resource deadLetterAlert 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: alertName
  location: 'global'
  tags: tags
  dependsOn: [actionGroup]
  properties: {
    description: 'Messages in a dead-letter queue (the EntityName dimension says which: ${queueName}, ${topicName} for all its subscriptions (one per consumer), ${statusQueueName} or ${statusSessionsQueueName}): list them with `orders dlq list` (`--queue Q` or `--topic ${topicName} --subscription S`), then follow the runbook for their DeadLetterReason in docs/operations.md (`orders dlq show`, `orders dlq resubmit`, `orders dlq purge`). PaymentRefused (billing: the provider refused the charge for good) and IllegalStatusTransition (a status update the order state machine forbids) are refusals on purpose: fix the cause, never resubmit blindly.'
    severity: 2
    enabled: true
    scopes: [namespace.id]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    // Resolves by itself once the dead-letter queue is drained, so the next dead letter raises a
    // new alert instead of hiding inside one that is still open.
    autoMitigate: true
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadLetteredMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [queueName, topicName, statusQueueName, statusSessionsQueueName]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    // By id rather than actionGroup.id: the action group exists only when notify is true.
    actions: notify ? [{ actionGroupId: resourceId('Microsoft.Insights/actionGroups', actionGroupName) }] : []
  }
}

output alertId string = deadLetterAlert.id
