// What the consumers and the HTTP API count, watched and drawn in Azure Monitor: an alert on any
// reused orderId (orders.mismatches), an alert on a duplicate ratio that says producers retry
// too much or locks expire too soon, and a workbook with the counters over time.
// The counters reach Application Insights as customMetrics (OpenTelemetry export).
param applicationInsightsName string
param location string
param tags object = {}
param mismatchAlertName string
param duplicateAlertName string
param actionGroupName string

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

resource mismatchAlert 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
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

resource duplicateAlert 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
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
      items: [counterChart, httpChart]
      isLocked: false
    })
  }
}

output workbookId string = workbook.id
