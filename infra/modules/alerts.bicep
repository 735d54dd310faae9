// A message in the dead-letter queue is an order the system refused on purpose (a payload that
// reuses an orderId with different content, poison, an expired message) or gave up on after
// maxDeliveryCount. None of them may go unnoticed, so any dead-lettered message raises an alert.
param alertName string
param actionGroupName string
param tags object = {}
param serviceBusNamespaceName string
param queueName string

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
    description: 'Messages in the dead-letter queue of ${queueName}: list them with `orders dlq list`, then follow the runbook for their DeadLetterReason in docs/operations.md (`orders dlq show`, `orders dlq resubmit`, `orders dlq purge`).'
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
              values: [queueName]
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
