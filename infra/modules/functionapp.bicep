// The function app on Flex Consumption (FC1): Python, one user-assigned identity for everything
// (deployment storage, host storage, Service Bus triggers, the Cosmos DB trigger, Cosmos DB,
// Application Insights), and
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
param orderEventsTopicName string
@description('The subscriptions of the consumers of the topic: { name, setting }; each is one app setting.')
param subscriptions array

// For-expressions are allowed only as a variable's (or property's) whole value, not inside concat.
var subscriptionSettings = [for consumer in subscriptions: { name: consumer.setting, value: consumer.name }]

@description('The status queue the app sends to and consumes: the plain one, or the session one when statusSessions.')
param statusQueueName string

@description('Status updates through the session queue (SessionId = orderId, FIFO per order) instead of versions alone.')
param statusSessions bool = false

param cosmosEndpoint string
param cosmosDatabaseName string
param cosmosOrdersContainerName string
param cosmosIdempotencyContainerName string
param cosmosInboxContainerName string
param cosmosLeasesContainerName string

@allowed(['3.11', '3.12'])
param pythonVersion string = '3.11'

// Sizing rule (infra/README.md): instances x host.json maxConcurrentCalls messages are in flight;
// Cosmos DB serves budget / RU-per-order of them per second and makes the rest wait in 429
// retries, which the SDK gives up after 30 s (then the message is abandoned, and after
// maxDeliveryCount dead-lettered). 40 x 16 = 640 in flight wait about 5 s on a 5,000 RU/s
// serverless container at ~40 RU an order: far inside 30 s. 40 is Flex Consumption's lowest cap.
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 40

@allowed([512, 2048, 4096])
param instanceMemoryMB int = 2048

@description('Subnet (delegated to Microsoft.App/environments) for VNet integration; empty: none.')
param virtualNetworkSubnetId string = ''

@description('Client id of the Entra app registration that protects the HTTP API; empty: no App Service authentication.')
param authClientId string = ''

@description('Token audience the API accepts; empty: api://<authClientId>.')
param authAudience string = ''

@description('Base URL of the payment service (PAYMENTS_URL); empty: not configured.')
param paymentsUrl string = ''

@description('BARE_EVENT_ID_CUTOVER: from when an event under its bare eventId is refused (ISO 8601 with offset); empty: accepted.')
param bareEventIdCutover string = ''

@description('Whether the billing trigger runs; false (no payment service yet) deploys `bill_order` disabled on purpose, so its deliveries wait in the subscription instead of dead-lettering.')
param billingEnabled bool = !empty(paymentsUrl)

@minValue(20)
@maxValue(604800)
@description('The broker duplicate-detection window in seconds (ORDERS_DUPLICATE_WINDOW_SECONDS), the same one messaging.bicep gives the entities.')
param duplicateWindowSeconds int = 600

// The redelivery window of the entities, as messaging.bicep gives it to them: the app keeps each
// exactly-once record (an inbox record, a billing record) for lock duration x maxDeliveryCount +
// message TTL + a margin for resubmitted dead letters (src/orders/settings.py), never less.
@description('The entities\' lock duration in seconds (ORDERS_LOCK_DURATION_SECONDS).')
param lockDurationSeconds int = 120
@description('The entities\' maxDeliveryCount (ORDERS_MAX_DELIVERY_COUNT).')
param maxDeliveryCount int = 10
@description('The entities\' message TTL in seconds (ORDERS_MESSAGE_TTL_SECONDS).')
param messageTimeToLiveSeconds int = 1209600

// Delayed retries (issue 43): a message whose in-place backoff was spent comes back as a
// scheduled copy, retry n after n x delayedRetrySeconds, up to delayedRetries times, and only
// then is dead-lettered RetriesExhausted. The identity schedules the copies with the Data Owner
// it holds on each consumer's queue and on the topic (roles.bicep).
@minValue(0)
@maxValue(100)
@description('Delayed retries per message once its in-place backoff is spent (ORDERS_DELAYED_RETRIES; 0 turns them off).')
param delayedRetries int = 3
@minValue(1)
@maxValue(86400)
@description('The delay unit of delayed retries in seconds (ORDERS_DELAYED_RETRY_SECONDS): retry n comes n units later.')
param delayedRetrySeconds int = 60

var authEnabled = !empty(authClientId)

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
  // checkov:skip=CKV_AZURE_222: The order HTTP API is the public entry point of this reference; callers are authenticated (function key, plus an Entra token when AZURE_AUTH_CLIENT_ID turns on App Service authentication), not network-restricted.
  // checkov:skip=CKV_AZURE_212: Flex Consumption scales from zero on queue length and HTTP load; a minimum instance count would be always-ready billing the reference does not need.
  // checkov:skip=CKV_AZURE_213: No health-check route: one that proves the HTTP worker up would not prove the queue consumer healthy, and pinging it keeps scale-to-zero instances billed; failures show in Application Insights.
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
    // Outbound traffic through the VNet (private endpoints) when vnetEnabled; null leaves it off.
    virtualNetworkSubnetId: empty(virtualNetworkSubnetId) ? null : virtualNetworkSubnetId
    publicNetworkAccess: 'Enabled'
    // checkov:skip=CKV_AZURE_17: Client certificates would lock out ordinary HTTPS clients of the order API; callers authenticate with a function key and, when configured, an Entra token instead.
    clientCertEnabled: false
    siteConfig: {
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      ftpsState: 'Disabled'
      http20Enabled: true
      // Flex Consumption takes no FUNCTIONS_WORKER_RUNTIME / FUNCTIONS_EXTENSION_VERSION: the
      // runtime comes from functionAppConfig.runtime below.
      // The fixed settings, then one `<NAME>_SUBSCRIPTION` per consumer subscription.
      appSettings: concat([
        // Host storage through the identity; no AzureWebJobsStorage connection string exists.
        { name: 'AzureWebJobsStorage__blobServiceUri', value: storageBlobEndpoint }
        { name: 'AzureWebJobsStorage__credential', value: 'managedidentity' }
        { name: 'AzureWebJobsStorage__clientId', value: identityClientId }
        // Service Bus trigger connection `ServiceBusConnection`, identity-based.
        { name: 'ServiceBusConnection__fullyQualifiedNamespace', value: serviceBusFullyQualifiedNamespace }
        { name: 'ServiceBusConnection__credential', value: 'managedidentity' }
        { name: 'ServiceBusConnection__clientId', value: identityClientId }
        { name: 'ORDERS_QUEUE', value: queueName }
        { name: 'ORDER_EVENTS_TOPIC', value: orderEventsTopicName }
        { name: 'STATUS_QUEUE', value: statusQueueName }
        { name: 'STATUS_SESSIONS', value: statusSessions ? 'true' : 'false' }
        // Cosmos DB trigger connection `CosmosConnection` (the outbox dispatcher), identity-based.
        { name: 'CosmosConnection__accountEndpoint', value: cosmosEndpoint }
        { name: 'CosmosConnection__credential', value: 'managedidentity' }
        { name: 'CosmosConnection__clientId', value: identityClientId }
        { name: 'COSMOS_ENDPOINT', value: cosmosEndpoint }
        { name: 'COSMOS_DATABASE', value: cosmosDatabaseName }
        { name: 'COSMOS_CONTAINER', value: cosmosOrdersContainerName }
        { name: 'COSMOS_IDEMPOTENCY_CONTAINER', value: cosmosIdempotencyContainerName }
        { name: 'COSMOS_INBOX_CONTAINER', value: cosmosInboxContainerName }
        { name: 'COSMOS_LEASES_CONTAINER', value: cosmosLeasesContainerName }
        { name: 'PAYMENTS_URL', value: paymentsUrl }
        // Billing and shipping refuse an event under its bare eventId from this time on.
        { name: 'BARE_EVENT_ID_CUTOVER', value: bareEventIdCutover }
        // The host skips a disabled function's trigger: with no payment service, billing events
        // stay in the `billing` subscription (up to their TTL) instead of failing ten times into
        // its dead-letter queue; they are billed once PAYMENTS_URL is set and this is 'false'.
        { name: 'AzureWebJobs.bill_order.Disabled', value: billingEnabled ? 'false' : 'true' }
        // What `orders dlq resubmit` and the console assume about the broker's window.
        { name: 'ORDERS_DUPLICATE_WINDOW_SECONDS', value: string(duplicateWindowSeconds) }
        // How long the exactly-once records outlive their messages: from the entities' settings.
        { name: 'ORDERS_LOCK_DURATION_SECONDS', value: string(lockDurationSeconds) }
        { name: 'ORDERS_MAX_DELIVERY_COUNT', value: string(maxDeliveryCount) }
        { name: 'ORDERS_MESSAGE_TTL_SECONDS', value: string(messageTimeToLiveSeconds) }
        // What becomes of a message once its in-place backoff is spent (every consumer).
        { name: 'ORDERS_DELAYED_RETRIES', value: string(delayedRetries) }
        { name: 'ORDERS_DELAYED_RETRY_SECONDS', value: string(delayedRetrySeconds) }
        // DefaultAzureCredential in the app picks the user-assigned identity through this.
        { name: 'AZURE_CLIENT_ID', value: identityClientId }
        { name: 'APPLICATIONINSIGHTS_CONNECTION_STRING', value: applicationInsightsConnectionString }
        // Application Insights refuses instrumentation-key ingestion; the host sends Entra tokens.
        { name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING', value: 'ClientId=${identityClientId};Authorization=AAD' }
        // host.json telemetryMode OpenTelemetry: the Python worker joins the host's trace per call.
        { name: 'PYTHON_ENABLE_OPENTELEMETRY', value: 'true' }
      ], subscriptionSettings)
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

// App Service authentication (Easy Auth) with Microsoft Entra ID, when an app registration is
// given (azd env set AZURE_AUTH_CLIENT_ID ...). Every HTTP request then needs a bearer token for
// authAudience; the platform validates it, strips client-sent X-MS-CLIENT-PRINCIPAL-* headers and
// sets them itself, and sets WEBSITE_AUTH_ENABLED=True in the app's environment. Without it the
// function key is the only gate. See infra/README.md "Who is calling".
resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = if (authEnabled) {
  // checkov:skip=CKV_AZURE_13: This resource IS the App Service authentication; checkov reads the sites/config child as a web app and looks for the older authsettings shape.
  // checkov:skip=CKV_AZURE_222: Site-level check misapplied to a sites/config child; public access of the site is decided (and justified) on the function app resource.
  // checkov:skip=CKV_AZURE_88: Site-level check misapplied to a sites/config child; Flex Consumption has no Azure Files content share at all.
  // checkov:skip=CKV_AZURE_80: Site-level check misapplied to a sites/config child; the app runs Python, not .NET Framework.
  parent: functionApp
  // checkov:skip=CKV_AZURE_63: Site-level check misapplied to a sites/config child; request telemetry goes to Application Insights through OpenTelemetry.
  // checkov:skip=CKV_AZURE_65: Site-level check misapplied to a sites/config child; errors are logged to Application Insights, never shown to callers.
  // checkov:skip=CKV_AZURE_66: Site-level check misapplied to a sites/config child; failed requests are traced in Application Insights.
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: true
      unauthenticatedClientAction: 'Return401'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: authClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [empty(authAudience) ? 'api://${authClientId}' : authAudience]
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
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
output authAudience string = authEnabled ? (empty(authAudience) ? 'api://${authClientId}' : authAudience) : ''
