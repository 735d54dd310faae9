"""The properties issue 4 asks of the Bicep templates, read from the parsed templates.

Values are evaluated as `azd up` deploys them with default parameters: a module parameter
takes what main.bicep passes, else its default (see bicep_model.resolve).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from .bicep_model import (
    INFRA,
    MAIN,
    bicep_files,
    declared_resource_names,
    get_path,
    module_calls,
    named_resource,
    one_resource,
    parse,
    resolve,
    resources,
    resources_of_type,
    strip_quotes,
)

SB_NAMESPACE = "Microsoft.ServiceBus/namespaces"
SB_QUEUE = "Microsoft.ServiceBus/namespaces/queues"
COSMOS_ACCOUNT = "Microsoft.DocumentDB/databaseAccounts"
COSMOS_CONTAINER = "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers"
PLAN = "Microsoft.Web/serverfarms"
SITE = "Microsoft.Web/sites"
STORAGE = "Microsoft.Storage/storageAccounts"
APP_INSIGHTS = "Microsoft.Insights/components"
LOG_ANALYTICS = "Microsoft.OperationalInsights/workspaces"
METRIC_ALERT = "Microsoft.Insights/metricAlerts"
# messaging.bicep declares several queues: rows name the entity they are about.
ORDERS_QUEUE = (SB_QUEUE, "orders")
SB_TOPIC = "Microsoft.ServiceBus/namespaces/topics"
SB_SUBSCRIPTION = "Microsoft.ServiceBus/namespaces/topics/subscriptions"
EVENTS_TOPIC = (SB_TOPIC, "order-events")
FANOUT_SUBSCRIPTIONS = [(SB_SUBSCRIPTION, "billing"), (SB_SUBSCRIPTION, "shipping")]
STATUS_QUEUES = {(SB_QUEUE, "order-status"): False, (SB_QUEUE, "order-status-sessions"): True}

# (module file, resource type, property path, expected value as deployed with defaults)
PROPERTIES: list[tuple[str, str | tuple[str, str], str, Any]] = [
    # Service Bus: Entra only, TLS 1.2, duplicate detection on the queue.
    ("modules/messaging.bicep", SB_NAMESPACE, "properties.disableLocalAuth", True),
    ("modules/messaging.bicep", SB_NAMESPACE, "properties.minimumTlsVersion", "1.2"),
    ("modules/messaging.bicep", ORDERS_QUEUE, "properties.requiresDuplicateDetection", True),
    (
        "modules/messaging.bicep",
        ORDERS_QUEUE,
        "properties.duplicateDetectionHistoryTimeWindow",
        "PT10M",
    ),
    ("modules/messaging.bicep", ORDERS_QUEUE, "properties.maxDeliveryCount", 10),
    ("modules/messaging.bicep", ORDERS_QUEUE, "properties.lockDuration", "PT2M"),
    ("modules/messaging.bicep", ORDERS_QUEUE, "properties.deadLetteringOnMessageExpiration", True),
    ("modules/messaging.bicep", ORDERS_QUEUE, "properties.defaultMessageTimeToLive", "P14D"),
    ("modules/messaging.bicep", ORDERS_QUEUE, "properties.requiresSession", False),
    ("modules/messaging.bicep", ORDERS_QUEUE, "properties.enableExpress", False),
    # The fan-out topic: the broker drops a dispatcher's re-publish (MessageId = outbox id).
    ("modules/messaging.bicep", EVENTS_TOPIC, "properties.requiresDuplicateDetection", True),
    (
        "modules/messaging.bicep",
        EVENTS_TOPIC,
        "properties.duplicateDetectionHistoryTimeWindow",
        "PT10M",
    ),
    ("modules/messaging.bicep", EVENTS_TOPIC, "properties.defaultMessageTimeToLive", "P14D"),
    ("modules/messaging.bicep", EVENTS_TOPIC, "properties.enableExpress", False),
    # Each consumer's subscription settles in PeekLock like the queue.
    *[
        ("modules/messaging.bicep", subscription, path, value)
        for subscription in FANOUT_SUBSCRIPTIONS
        for path, value in [
            ("properties.lockDuration", "PT2M"),
            ("properties.maxDeliveryCount", 10),
            ("properties.deadLetteringOnMessageExpiration", True),
            ("properties.defaultMessageTimeToLive", "P14D"),
            ("properties.requiresSession", False),
        ]
    ],
    # Status updates: versions on the plain queue, FIFO per order on the session queue.
    *[
        ("modules/messaging.bicep", queue, path, value)
        for queue, sessions in STATUS_QUEUES.items()
        for path, value in [
            ("properties.requiresSession", sessions),
            ("properties.requiresDuplicateDetection", True),
            ("properties.duplicateDetectionHistoryTimeWindow", "PT10M"),
            ("properties.lockDuration", "PT2M"),
            ("properties.maxDeliveryCount", 10),
            ("properties.deadLetteringOnMessageExpiration", True),
            ("properties.enableExpress", False),
        ]
    ],
    # Cosmos DB: Entra only, containers as the code expects them.
    ("modules/database.bicep", COSMOS_ACCOUNT, "kind", "GlobalDocumentDB"),
    ("modules/database.bicep", COSMOS_ACCOUNT, "properties.disableLocalAuth", True),
    (
        "modules/database.bicep",
        COSMOS_ACCOUNT,
        "properties.disableKeyBasedMetadataWriteAccess",
        True,
    ),
    ("modules/database.bicep", COSMOS_ACCOUNT, "properties.minimalTlsVersion", "Tls12"),
    (
        "modules/database.bicep",
        "Microsoft.DocumentDB/databaseAccounts/sqlDatabases",
        "name",
        "orders",
    ),
    # Function app: Flex Consumption, Python, user-assigned identity, HTTPS only, FTP off.
    ("modules/functionapp.bicep", PLAN, "sku.name", "FC1"),
    ("modules/functionapp.bicep", PLAN, "sku.tier", "FlexConsumption"),
    ("modules/functionapp.bicep", PLAN, "properties.reserved", True),
    ("modules/functionapp.bicep", SITE, "kind", "functionapp,linux"),
    ("modules/functionapp.bicep", SITE, "identity.type", "UserAssigned"),
    ("modules/functionapp.bicep", SITE, "properties.httpsOnly", True),
    ("modules/functionapp.bicep", SITE, "properties.siteConfig.minTlsVersion", "1.2"),
    ("modules/functionapp.bicep", SITE, "properties.siteConfig.ftpsState", "Disabled"),
    ("modules/functionapp.bicep", SITE, "properties.functionAppConfig.runtime.name", "python"),
    ("modules/functionapp.bicep", SITE, "properties.functionAppConfig.runtime.version", "3.11"),
    (
        "modules/functionapp.bicep",
        SITE,
        "properties.functionAppConfig.deployment.storage.type",
        "blobContainer",
    ),
    (
        "modules/functionapp.bicep",
        SITE,
        "properties.functionAppConfig.deployment.storage.authentication.type",
        "UserAssignedIdentity",
    ),
    # Deployment storage: identity auth only.
    ("modules/storage.bicep", STORAGE, "properties.allowSharedKeyAccess", False),
    ("modules/storage.bicep", STORAGE, "properties.allowBlobPublicAccess", False),
    ("modules/storage.bicep", STORAGE, "properties.minimumTlsVersion", "TLS1_2"),
    ("modules/storage.bicep", STORAGE, "properties.supportsHttpsTrafficOnly", True),
    # Monitoring: local auth off.
    ("modules/monitoring.bicep", APP_INSIGHTS, "properties.DisableLocalAuth", True),
    ("modules/monitoring.bicep", APP_INSIGHTS, "properties.Application_Type", "web"),
    ("modules/monitoring.bicep", LOG_ANALYTICS, "properties.features.disableLocalAuth", True),
    # Dead-letter alert on the orders queue.
    ("modules/alerts.bicep", METRIC_ALERT, "properties.enabled", True),
    (
        "modules/alerts.bicep",
        METRIC_ALERT,
        "properties.criteria.allOf.0.metricName",
        "DeadletteredMessages",
    ),
    ("modules/alerts.bicep", METRIC_ALERT, "properties.criteria.allOf.0.operator", "GreaterThan"),
    ("modules/alerts.bicep", METRIC_ALERT, "properties.criteria.allOf.0.threshold", 0),
]


def _label(type_: str | tuple[str, str]) -> str:
    return (
        f"{type_[0].split('/')[-1]}[{type_[1]}]"
        if isinstance(type_, tuple)
        else type_.split("/")[-1]
    )


def _get(body: Any, dotted: str) -> Any:
    node = body
    for part in dotted.split("."):
        node = node[int(part)] if isinstance(node, list) else get_path(node, part)
    return node


@pytest.mark.parametrize(
    ("module", "type_", "path", "expected"),
    PROPERTIES,
    ids=[f"{m.split('/')[-1]}:{_label(t)}:{p}" for m, t, p, _ in PROPERTIES],
)
def test_property(module: str, type_: str | tuple[str, str], path: str, expected: Any) -> None:
    if isinstance(type_, tuple):
        resource = named_resource(module, *type_)
    else:
        resource = one_resource(parse(module), type_)
    assert resolve(module, _get(resource.body, path)) == expected


def test_every_bicep_file_parses_and_no_resource_is_dropped(
    templates: dict[str, dict[str, Any]],
) -> None:
    assert set(templates) >= {
        MAIN,
        "modules/messaging.bicep",
        "modules/database.bicep",
        "modules/functionapp.bicep",
        "modules/monitoring.bicep",
        "modules/identity.bicep",
        "modules/roles.bicep",
    }
    for relative, doc in templates.items():
        # What pycep parsed (a loop resource is one symbol here; resources() expands it).
        parsed = [symbol.split("__")[-1] for symbol in doc.get("resources", {})]
        assert sorted(parsed) == sorted(declared_resource_names(relative)), relative


def test_main_is_subscription_scoped_and_creates_the_resource_group() -> None:
    main = parse(MAIN)
    assert main["globals"]["scope"]["value"] == "subscription"
    rg = one_resource(main, "Microsoft.Resources/resourceGroups")
    assert strip_quotes(next(iter(resolve(MAIN, rg.body["tags"])))) == "azd-env-name"
    for symbol, call in module_calls(main).items():
        assert call["config"]["scope"] == rg.symbol, f"module {symbol} is not deployed into the rg"


def test_every_module_file_is_used_by_main_and_exists() -> None:
    used = {call["detail"]["path"] for call in module_calls(parse(MAIN)).values()}
    on_disk = {f for f in bicep_files() if f != MAIN}
    assert used == on_disk
    for relative in used:
        assert (INFRA / relative).is_file()


def test_names_follow_azd_conventions() -> None:
    main = parse(MAIN)
    token = main["variables"]["resourceToken"]["value"]
    # toLower(uniqueString(subscription().id, environmentName, location))
    assert token["function"]["type"] == "to_lower"
    unique = token["function"]["parameters"]["string_to_change"]["function"]
    assert unique["type"] == "unique_string"
    args = unique["parameters"]
    assert args["base_string"] == {
        "operator": {
            "type": "property_accessor",
            "operands": {
                "operand_1": {
                    "function": {"type": "subscription", "parameters": {"subscription_id": None}}
                },
                "operand_2": "id",
            },
        }
    }
    assert [args["extra_string_1"], args["extra_string_2"]] == ["environmentName", "location"]

    import json

    abbreviations = json.loads((INFRA / "abbreviations.json").read_text(encoding="utf-8"))
    text = (INFRA / MAIN).read_text(encoding="utf-8")
    used_keys = set(re.findall(r"abbrs\.(\w+)", text))
    assert used_keys, "main.bicep builds no names from abbreviations.json"
    assert used_keys <= set(abbreviations), used_keys - set(abbreviations)
    for symbol, call in module_calls(main).items():
        for key, value in call["config"]["params"].items():
            if key.lower().endswith("name") and isinstance(value, str) and "${" in value:
                assert "${abbrs." in value and "${resourceToken}" in value, (symbol, key, value)


def test_every_tagged_resource_carries_the_module_tags(
    templates: dict[str, dict[str, Any]],
) -> None:
    main_params = {
        symbol: call["config"]["params"] for symbol, call in module_calls(parse(MAIN)).items()
    }
    for symbol, params in main_params.items():
        if "tags" in params:
            assert params["tags"] == "tags", symbol
    for relative, doc in templates.items():
        if relative == MAIN:
            continue
        for res in resources(doc):
            if res.existing or "tags" not in res.body:
                continue
            tags = res.body["tags"]
            assert tags == "tags" or "tags" in repr(tags), (relative, res.symbol)


def test_function_app_carries_the_azd_service_tag_of_azure_yaml() -> None:
    import yaml

    site = one_resource(parse("modules/functionapp.bicep"), SITE)
    union = site.body["tags"]["function"]
    assert union["type"] == "union"
    assert union["parameters"]["arg_1"] == "tags"
    extra = {strip_quotes(k): v for k, v in union["parameters"]["arg_2"].items()}
    azure_yaml = yaml.safe_load((INFRA.parent / "azure.yaml").read_text(encoding="utf-8"))
    assert extra == {"azd-service-name": "api"}
    assert set(azure_yaml["services"]) == {"api"}


def test_service_bus_tier_is_never_basic() -> None:
    for relative, name in [(MAIN, "serviceBusSku"), ("modules/messaging.bicep", "skuName")]:
        param = parse(relative)["parameters"][name]
        allowed = next(d["argument"] for d in param["decorators"] if d["type"] == "allowed")
        assert set(allowed) == {"Standard", "Premium"}
        assert param["default"] == "Standard"


def _iso_seconds(duration: str) -> int:
    match = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", duration)
    assert match and duration not in ("P", "PT"), duration
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def test_lock_duration_covers_the_functions_worst_case_within_the_service_limit() -> None:
    # The consumer's worst case that still settles (messaging.bicep explains it): the 5 s batch
    # limit + 30 s of 429 retries on the batch + 30 s on the duplicate's point read + ~1 s.
    worst_case_seconds = 5 + 30 + 30 + 1
    queue = named_resource("modules/messaging.bicep", *ORDERS_QUEUE)
    lock = _iso_seconds(
        resolve("modules/messaging.bicep", queue.body["properties"]["lockDuration"])
    )
    assert worst_case_seconds < lock <= 5 * 60
    text = (INFRA / "modules/messaging.bicep").read_text(encoding="utf-8")
    assert "worst case" in text, "the lockDuration choice must be explained next to it"


def test_the_topic_and_subscriptions_share_the_queues_parameters() -> None:
    """One window, one delivery count, one lock and one TTL for every entity: each is the same
    expression (a parameter or the lockDuration variable), not a copy of its value."""
    module = "modules/messaging.bicep"
    entities = [
        named_resource(module, *entity)
        for entity in [ORDERS_QUEUE, EVENTS_TOPIC, *FANOUT_SUBSCRIPTIONS, *STATUS_QUEUES]
    ]
    for path, expression in [
        ("duplicateDetectionHistoryTimeWindow", "duplicateDetectionHistoryTimeWindow"),
        ("maxDeliveryCount", "maxDeliveryCount"),
        ("lockDuration", "lockDuration"),
        ("defaultMessageTimeToLive", "messageTimeToLive"),
    ]:
        using = [e for e in entities if path in e.body["properties"]]
        assert len(using) >= 4, path
        for entity in using:
            assert entity.body["properties"][path] == expression, (entity.symbol, path)
    subscriptions = [named_resource(module, *s) for s in FANOUT_SUBSCRIPTIONS]
    assert {s.body["parent"] for s in subscriptions} == {"topic"}
    topic = named_resource(module, *EVENTS_TOPIC)
    assert topic.symbol == "topic" and topic.body["parent"] == "namespace"


def test_messaging_outputs_name_every_entity() -> None:
    module = "modules/messaging.bicep"
    outputs = {
        name: resolve(module, output["value"]) for name, output in parse(module)["outputs"].items()
    }
    assert {
        "queueName": "orders",
        "topicName": "order-events",
        "statusQueueName": "order-status",
        "statusSessionsQueueName": "order-status-sessions",
    }.items() <= outputs.items()
    # One { name, setting } per subscription the loop deployed, in the array's order.
    assert [
        {key: resolve(module, value) for key, value in entry.items()}
        for entry in outputs["subscriptions"]
    ] == [
        {"name": "billing", "setting": "BILLING_SUBSCRIPTION"},
        {"name": "shipping", "setting": "SHIPPING_SUBSCRIPTION"},
    ]


def test_duplicate_detection_window_is_within_the_service_range() -> None:
    queue = named_resource("modules/messaging.bicep", *ORDERS_QUEUE)
    window = resolve(
        "modules/messaging.bicep", queue.body["properties"]["duplicateDetectionHistoryTimeWindow"]
    )
    assert 20 <= _iso_seconds(window) <= 7 * 24 * 3600


def test_cosmos_containers_match_the_code() -> None:
    module = "modules/database.bicep"
    containers = {
        resolve(module, c.body["name"]): c.body["properties"]["resource"]
        for c in resources_of_type(parse(module), COSMOS_CONTAINER)
    }
    # What ensure_local_resources creates on the emulators, with the same partition keys.
    expected_keys = {
        "orders": "/orderId",
        "idempotency": "/id",
        "inbox": "/orderId",
        "leases": "/id",
    }
    assert set(containers) == set(expected_keys)
    for name, resource in containers.items():
        assert resource["partitionKey"]["paths"] == [expected_keys[name]], name
        assert resource["partitionKey"]["kind"] == "Hash", name
        assert resolve(module, resource["id"]) == name
    # TTL on (items carry their own ttl) where the code expires records (the inbox's records
    # since issue 34); the leases keep theirs, as the local containers do.
    ttls = {name: resolve(module, r.get("defaultTtl")) for name, r in containers.items()}
    assert ttls == {"orders": -1, "idempotency": -1, "inbox": -1, "leases": None}
    # Trimmed: nothing is indexed unless listed; exactly the paths the code's queries filter on
    # (see the comments in database.bicep). The trigger's lease container keeps the default.
    trimmed = {name: r for name, r in containers.items() if name != "leases"}
    for name, resource in trimmed.items():
        policy = resource["indexingPolicy"]
        assert {"path": "/*"} in policy["excludedPaths"], name
        assert {"path": "/*"} not in policy["includedPaths"], name
    indexed = {
        name: {entry["path"] for entry in resource["indexingPolicy"]["includedPaths"]}
        for name, resource in trimmed.items()
    }
    assert indexed == {
        "orders": {"/orderId/?", "/type/?"},
        "idempotency": {"/type/?", "/orderId/?", "/scope/?", "/status/?"},
        "inbox": {"/orderId/?"},
    }
    assert "indexingPolicy" not in containers["leases"]


def test_cosmos_is_serverless_by_default_with_a_provisioned_option() -> None:
    module = "modules/database.bicep"
    assert resolve(MAIN, "cosmosCapacityMode") == "Serverless"
    account = one_resource(parse(module), COSMOS_ACCOUNT)
    capabilities = account.body["properties"]["capabilities"]["operator"]
    assert capabilities["type"] == "conditional"
    assert capabilities["operands"]["true_value"] == [{"name": "EnableServerless"}]
    assert resolve(module, capabilities["operands"]["condition"]) is True
    database = one_resource(parse(module), "Microsoft.DocumentDB/databaseAccounts/sqlDatabases")
    options = database.body["properties"]["options"]["operator"]["operands"]
    assert options["false_value"] == {
        "autoscaleSettings": {"maxThroughput": "autoscaleMaxThroughput"}
    }


def test_flex_deployment_storage_uses_the_user_assigned_identity() -> None:
    site = one_resource(parse("modules/functionapp.bicep"), SITE)
    storage = site.body["properties"]["functionAppConfig"]["deployment"]["storage"]
    assert storage["authentication"]["userAssignedIdentityResourceId"] == "identityId"
    assert storage["value"] == "${storageBlobEndpoint}${deploymentContainerName}"
    identities = site.body["identity"]["userAssignedIdentities"]
    assert [strip_quotes(k) for k in identities] == ["${identityId}"]
    scale = site.body["properties"]["functionAppConfig"]["scaleAndConcurrency"]
    assert {"maximumInstanceCount", "instanceMemoryMB"} <= set(scale)


def test_basic_auth_publishing_is_off() -> None:
    module = "modules/functionapp.bicep"
    policies = resources_of_type(
        parse(module), "Microsoft.Web/sites/basicPublishingCredentialsPolicies"
    )
    assert {p.body["name"]: p.body["properties"]["allow"] for p in policies} == {
        "ftp": False,
        "scm": False,
    }


def test_dead_letter_alert_watches_every_queue_and_the_topic() -> None:
    module = "modules/alerts.bicep"
    alert = one_resource(parse(module), METRIC_ALERT)
    criterion = alert.body["properties"]["criteria"]["allOf"][0]
    assert criterion["metricNamespace"] == SB_NAMESPACE
    dimension = criterion["dimensions"][0]
    assert dimension["name"] == "EntityName"
    assert dimension["operator"] == "Include"
    # Azure Monitor counts a topic's dead letters per topic (its subscriptions summed): the topic
    # stands for billing and shipping.
    watched = [resolve(module, v) for v in dimension["values"]]
    assert watched == ["orders", "order-events", "order-status", "order-status-sessions"]
    deployed = {
        resolve("modules/messaging.bicep", r.body["name"])
        for r in resources(parse("modules/messaging.bicep"))
        if r.type in (SB_QUEUE, "Microsoft.ServiceBus/namespaces/topics") and not r.existing
    }
    assert set(watched) == deployed, "an entity that can dead-letter is not watched"
    description = alert.body["properties"]["description"]
    for reason in ("PaymentRefused", "IllegalStatusTransition", "--subscription"):
        assert reason in description, reason
    assert alert.body["properties"]["scopes"] == [
        {
            "operator": {
                "type": "property_accessor",
                "operands": {"operand_1": "namespace", "operand_2": "id"},
            }
        }
    ]


@pytest.mark.parametrize("relative", bicep_files())
def test_no_keys_or_connection_strings_anywhere(relative: str) -> None:
    text = (INFRA / relative).read_text(encoding="utf-8")
    for forbidden in (
        "listKeys",
        "listConnectionStrings",
        "AccountKey=",
        "SharedAccessKey",
        "primaryKey",
    ):
        assert forbidden not in text, f"{relative} uses {forbidden}"
