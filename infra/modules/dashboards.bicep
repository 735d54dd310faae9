// What the consumers, the outbox dispatcher and the HTTP API count and log, watched and drawn in
// Azure Monitor: an alert on any reused orderId (orders.mismatches), an alert on a duplicate
// ratio that says producers retry too much or locks expire too soon, an alert on every `ALERT`
// log line, alerts on the dispatcher's failures and lag, and a workbook with the counters over
// time. Counters reach Application Insights as customMetrics and log lines as traces
// (OpenTelemetry export, src/orders/adapters/monitoring.py). The scheduled query rules use the
// generally available API version 2023-12-01.
param applicationInsightsName string
param location string
param tags object = {}
param mismatchAlertName string
param duplicateAlertName string
param alertLinesAlertName string
param dispatcherFailuresAlertName string
param dispatcherLagAlertName string
param actionGroupName string

@description('Alert when an outbox document waited longer than this many seconds to be published (orders.dispatcher.lag).')
@minValue(10)
param dispatcherLagThresholdSeconds int = 300

@description('Alert when duplicates exceed this percentage of the orders handled in 30 minutes.')
@minValue(1)
@maxValue(100)
param duplicatePercentThreshold int = 20

@description('Whether the alerts e-mail the action group (created by the dead-letter alert).')
param notify bool = false

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

var actions = notify ? { actionGroups: [resourceId('Microsoft.Insights/actionGroups', actionGroupName)] } : {}

resource mismatchAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: mismatchAlertName
  location: location
  tags: tags
  properties: {
    description: 'A producer reused an orderId for a different order (RequestHashMismatch): the message is in the dead-letter queue. Run `orders dlq list`, then see docs/operations.md.'
    severity: 1
    enabled: true
    scopes: [applicationInsights.id]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == "orders.mismatches" | summarize mismatches = sum(valueSum)'
          timeAggregation: 'Total'
          metricMeasureColumn: 'mismatches'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: { numberOfEvaluationPeriods: 1, minFailingPeriodsToAlert: 1 }
        }
      ]
    }
    actions: actions
  }
}

resource duplicateAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: duplicateAlertName
  location: location
  tags: tags
  properties: {
    description: 'Duplicates are more than ${duplicatePercentThreshold}% of the orders handled: producers retry too much, or message locks expire before processing ends (lockDuration, maxAutoLockRenewalDuration). Nothing is doubled; it costs throughput.'
    severity: 3
    enabled: true
    scopes: [applicationInsights.id]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT30M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name in ("orders.processed", "orders.duplicates") | summarize processed = sumif(valueSum, name == "orders.processed"), duplicates = sumif(valueSum, name == "orders.duplicates") | where processed + duplicates > 0 | extend duplicatePercent = 100.0 * duplicates / (processed + duplicates)'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'duplicatePercent'
          operator: 'GreaterThan'
          threshold: duplicatePercentThreshold
          failingPeriods: { numberOfEvaluationPeriods: 1, minFailingPeriodsToAlert: 1 }
        }
      ]
    }
    actions: actions
  }
}

// Every log line the app writes with the `ALERT` prefix: a reused orderId, a payment the provider
// refused for good, an event no stored order vouches for (src/orders/observability.py,
// service/billing.py, service/saga.py). Each is a decision a person must look at.
resource alertLinesAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: alertLinesAlertName
  location: location
  tags: tags
  properties: {
    description: 'The app logged an ALERT line: a producer reused an orderId for a different order, the payment provider refused a charge or refund for good, an event arrived that no stored order vouches for, or the outbox dispatcher parked a document it can never publish. The message text names the order; its message is in a dead-letter queue (`orders dlq list`, then docs/operations.md) or, for a parked outbox document, in `orders outbox parked` (docs/fanout.md).'
    severity: 1
    enabled: true
    scopes: [applicationInsights.id]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: 'traces | where message startswith "ALERT "'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: { numberOfEvaluationPeriods: 1, minFailingPeriodsToAlert: 1 }
        }
      ]
    }
    actions: actions
  }
}

// The dispatcher retries a failed batch forever (function_app.py: max_retry_count -1), so a
// failure that does not heal is silent unless counted: three failed windows in a row alert.
resource dispatcherFailuresAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: dispatcherFailuresAlertName
  location: location
  tags: tags
  properties: {
    description: 'The outbox dispatcher keeps failing to publish to the order-events topic or to mark what it published (orders.dispatcher.failures in three 5-minute windows in a row). Orders are stored but billing and shipping do not hear of them. Look at the exceptions of dispatch_outbox in Application Insights: a Service Bus or Cosmos DB outage, or a missing role.'
    severity: 2
    enabled: true
    scopes: [applicationInsights.id]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == "orders.dispatcher.failures" | summarize failures = sum(valueSum)'
          timeAggregation: 'Total'
          metricMeasureColumn: 'failures'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: { numberOfEvaluationPeriods: 3, minFailingPeriodsToAlert: 3 }
        }
      ]
    }
    actions: actions
  }
}

// Lag: seconds from an outbox document's write to an attempt to publish it, recorded on every
// attempt (retries too), so it grows while the dispatcher fails or falls behind.
resource dispatcherLagAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: dispatcherLagAlertName
  location: location
  tags: tags
  properties: {
    description: 'Orders wait more than ${dispatcherLagThresholdSeconds} s between being stored and their event being published (orders.dispatcher.lag): the dispatcher is failing (see its failures alert) or cannot keep up with the change feed. Billing and shipping run that much behind.'
    severity: 2
    enabled: true
    scopes: [applicationInsights.id]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == "orders.dispatcher.lag" | summarize lagSeconds = max(valueMax)'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'lagSeconds'
          operator: 'GreaterThan'
          threshold: dispatcherLagThresholdSeconds
          failingPeriods: { numberOfEvaluationPeriods: 1, minFailingPeriodsToAlert: 1 }
        }
      ]
    }
    actions: actions
  }
}

var counterChart = {
  type: 3
  content: {
    version: 'KqlItem/1.0'
    query: 'customMetrics | where name in ("orders.processed", "orders.duplicates", "orders.mismatches", "orders.dead_lettered", "orders.abandoned") | summarize count = sum(valueSum) by name, bin(timestamp, 5m) | render timechart'
    size: 0
    title: 'Messages by outcome (throughput, duplicates, mismatches, dead letters, abandons)'
    queryType: 0
    resourceType: 'microsoft.insights/components'
    visualization: 'timechart'
  }
  name: 'consumer-outcomes'
}

// Every registered consumer counts `orders.<name>.decisions` (SubscriberTelemetry in
// src/orders/observability.py), so a new one is drawn without a change here.
var fanoutChart = {
  type: 3
  content: {
    version: 'KqlItem/1.0'
    query: 'customMetrics | where (name startswith "orders." and name endswith ".decisions") or name in ("orders.dispatcher.published", "orders.dispatcher.failures", "orders.dispatcher.parked") | extend outcome = tostring(customDimensions.outcome) | summarize count = sum(valueSum) by series = strcat(name, iff(isempty(outcome), "", strcat(" ", outcome))), bin(timestamp, 5m) | render timechart'
    size: 0
    title: 'After the order: dispatcher publishes and failures; decisions of every registered consumer by outcome'
    queryType: 0
    resourceType: 'microsoft.insights/components'
    visualization: 'timechart'
  }
  name: 'fanout-outcomes'
}

var httpChart = {
  type: 3
  content: {
    version: 'KqlItem/1.0'
    query: 'customMetrics | where name startswith "orders.http." | summarize count = sum(valueSum) by name, bin(timestamp, 5m) | render timechart'
    size: 0
    title: 'HTTP API: replays, in-progress 409s, key reuse 422s, orderId conflicts, takeovers, 5xx'
    queryType: 0
    resourceType: 'microsoft.insights/components'
    visualization: 'timechart'
  }
  name: 'http-intake'
}

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  name: guid(resourceGroup().id, applicationInsightsName, 'orders-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: 'Orders: exactly-once processing'
    category: 'workbook'
    sourceId: applicationInsights.id
    serializedData: string({
      version: 'Notebook/1.0'
      items: [counterChart, fanoutChart, httpChart]
      isLocked: false
    })
  }
}

output workbookId string = workbook.id
