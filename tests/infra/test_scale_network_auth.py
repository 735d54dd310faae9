"""Scale-out sizing, the opt-in private network and App Service authentication (issue 16).

Each test reads the parsed Bicep (values as `azd up` deploys them with default parameters) and
fails if the property the issue names is missing or different.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .bicep_model import (
    INFRA,
    MAIN,
    REPO_ROOT,
    get_path,
    module_calls,
    one_resource,
    parse,
    resolve,
    resources,
    resources_of_type,
)

FUNCTION = "modules/functionapp.bicep"
NETWORK = "modules/network.bicep"
SITE = "Microsoft.Web/sites"


def _decorator(param: dict[str, Any], kind: str) -> Any:
    return next(d["argument"] for d in param["decorators"] if d["type"] == kind)


def _call(path: str) -> dict[str, Any]:
    (call,) = [c for c in module_calls(parse(MAIN)).values() if c["detail"]["path"] == path]
    return dict(call)


def _mapped(name: str) -> str:
    values = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    value: str = values["parameters"][name]["value"]
    return value


# --- sizing --------------------------------------------------------------------------------

# The sizing rule of infra/README.md ("Sizing"): in-flight messages / (RU budget / RU per order)
# is the time a message waits in Cosmos DB 429 retries, which the SDK abandons after 30 s.
SERVERLESS_RU_PER_SECOND = 5_000
RU_PER_ORDER = 40
SDK_RETRY_BUDGET_SECONDS = 30
SAFETY_FACTOR = 5


def test_default_scale_out_cannot_throttle_serverless_cosmos_into_dead_letters() -> None:
    host = json.loads((REPO_ROOT / "host.json").read_text(encoding="utf-8"))
    per_instance = host["extensions"]["serviceBus"]["maxConcurrentCalls"]
    for relative in (MAIN, FUNCTION):
        param = parse(relative)["parameters"]["maximumInstanceCount"]
        assert param["default"] == 40, relative
        assert _decorator(param, "min_value") == 40  # Flex Consumption's lowest cap
    assert _mapped("maximumInstanceCount") == "${FUNCTION_MAXIMUM_INSTANCE_COUNT=40}"
    site = one_resource(parse(FUNCTION), SITE)
    scale = site.body["properties"]["functionAppConfig"]["scaleAndConcurrency"]
    instances = resolve(FUNCTION, scale["maximumInstanceCount"])
    assert instances == 40
    in_flight = instances * per_instance
    orders_per_second = SERVERLESS_RU_PER_SECOND / RU_PER_ORDER
    wait_seconds = in_flight / orders_per_second
    assert wait_seconds * SAFETY_FACTOR <= SDK_RETRY_BUDGET_SECONDS, (in_flight, wait_seconds)
    readme = (INFRA / "README.md").read_text(encoding="utf-8")
    assert "### Sizing" in readme and "maxConcurrentCalls" in readme


def test_service_bus_tier_is_marked_choose_before_the_first_up() -> None:
    param = parse(MAIN)["parameters"]["serviceBusSku"]
    assert "before the first `azd up`" in _decorator(param, "description")
    text = (INFRA / "modules/messaging.bicep").read_text(encoding="utf-8")
    assert "Choose before the first `azd up`" in text


# --- private network (opt-in) -----------------------------------------------------------------


def test_vnet_is_off_by_default_and_switches_the_network_module() -> None:
    param = parse(MAIN)["parameters"]["vnetEnabled"]
    assert param["type"] == "bool" and param["default"] is False
    # Passed by the parameter file, with a default: the official templates' required
    # `vnetEnabled` that nobody passed is a known defect this must not repeat.
    assert _mapped("vnetEnabled") == "${VNET_ENABLED=false}"
    network = _call(NETWORK)
    assert network["condition"] == "vnetEnabled"
    assert resolve(MAIN, "privateServiceBus") is False


@pytest.mark.parametrize(
    ("module", "variable"),
    [
        ("modules/storage.bicep", "dataPublicNetworkAccess"),
        ("modules/database.bicep", "dataPublicNetworkAccess"),
    ],
)
def test_data_services_go_private_with_the_vnet(module: str, variable: str) -> None:
    assert _call(module)["config"]["params"]["publicNetworkAccess"] == variable
    value = parse(MAIN)["variables"][variable]["value"]["operator"]
    assert value["type"] == "conditional"
    assert value["operands"]["condition"] == "vnetEnabled"
    assert value["operands"]["true_value"] == "Disabled"
    assert value["operands"]["false_value"] == "Enabled"
    assert resolve(module, "publicNetworkAccess") == "Enabled"  # as deployed by default


def test_service_bus_goes_private_only_on_premium() -> None:
    passed = _call("modules/messaging.bicep")["config"]["params"]["publicNetworkAccess"]
    operands = passed["operator"]["operands"]
    assert operands["condition"] == "privateServiceBus"
    assert (operands["true_value"], operands["false_value"]) == ("Disabled", "Enabled")
    # privateServiceBus = vnetEnabled && serviceBusSku == 'Premium' (Standard: no endpoints).
    both = parse(MAIN)["variables"]["privateServiceBus"]["value"]["operator"]
    assert both["type"] == "and" and both["operands"]["operand_1"] == "vnetEnabled"
    premium = both["operands"]["operand_2"]["operator"]["operands"]
    assert (premium["operand_1"], premium["operand_2"]) == ("serviceBusSku", "Premium")
    assert _call(NETWORK)["config"]["params"]["serviceBusPrivateEndpoint"] == "privateServiceBus"


def test_network_module_delegates_the_app_subnet_and_fronts_each_service() -> None:
    doc = parse(NETWORK)
    vnet = one_resource(doc, "Microsoft.Network/virtualNetworks")
    subnets = {
        resolve(NETWORK, s["name"]): s["properties"] for s in vnet.body["properties"]["subnets"]
    }
    delegation = subnets["app"]["delegations"][0]["properties"]["serviceName"]
    assert delegation == "Microsoft.App/environments"
    assert "_" not in "".join(subnets), "Flex Consumption refuses subnet names with underscores"
    endpoints = {
        r.symbol: (r.condition, r.body["properties"]["privateLinkServiceConnections"][0])
        for r in resources(doc)
        if r.type == "Microsoft.Network/privateEndpoints"
    }
    groups = {symbol: c["properties"]["groupIds"] for symbol, (_, c) in endpoints.items()}
    assert groups == {
        "storageEndpoint": ["blob"],
        "cosmosEndpoint": ["Sql"],
        "serviceBusEndpoint": ["namespace"],
    }
    assert endpoints["serviceBusEndpoint"][0] == "serviceBusPrivateEndpoint"
    zone_groups = [
        r for r in resources(doc) if r.type.endswith("/privateDnsZoneGroups") and not r.existing
    ]
    assert sorted(r.body["parent"] for r in zone_groups) == sorted(endpoints)


def test_function_app_joins_the_app_subnet_only_with_the_vnet() -> None:
    passed = _call(FUNCTION)["config"]["params"]["virtualNetworkSubnetId"]["operator"]
    assert passed["operands"]["condition"] == "vnetEnabled"
    assert passed["operands"]["false_value"] == ""
    site = one_resource(parse(FUNCTION), SITE)
    subnet = site.body["properties"]["virtualNetworkSubnetId"]["operator"]["operands"]
    assert subnet["true_value"] is None  # empty subnet id: no VNet integration


# --- who is calling: App Service authentication ----------------------------------------------

AUTH = "Microsoft.Web/sites/config"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("name", "authsettingsV2"),
        ("properties.platform.enabled", True),
        ("properties.globalValidation.requireAuthentication", True),
        ("properties.globalValidation.unauthenticatedClientAction", "Return401"),
        ("properties.httpSettings.requireHttps", True),
        ("properties.identityProviders.azureActiveDirectory.enabled", True),
        ("properties.identityProviders.azureActiveDirectory.registration.clientId", "authClientId"),
        ("properties.login.tokenStore.enabled", False),
    ],
)
def test_app_service_authentication_property(path: str, expected: Any) -> None:
    auth = one_resource(parse(FUNCTION), AUTH)
    assert get_path(auth.body, path) == expected


def test_app_service_authentication_is_opt_in_by_app_registration() -> None:
    doc = parse(FUNCTION)
    auth = one_resource(doc, AUTH)
    assert auth.condition == "authEnabled" and auth.body["parent"] == "functionApp"
    assert doc["parameters"]["authClientId"]["default"] == ""
    assert _call(FUNCTION)["config"]["params"]["authClientId"] == "authClientId"
    assert _mapped("authClientId") == "${AZURE_AUTH_CLIENT_ID}"
    aad = auth.body["properties"]["identityProviders"]["azureActiveDirectory"]
    # No client secret: the API only validates bearer tokens, it never signs anyone in.
    assert "clientSecretSettingName" not in aad["registration"]
    assert aad["registration"]["openIdIssuer"].endswith("${tenant().tenantId}/v2.0")
    (audience,) = aad["validation"]["allowedAudiences"]
    assert audience["operator"]["operands"]["true_value"] == "api://${authClientId}"
    # Callers learn the audience to ask Entra ID for from the azd environment.
    assert "AZURE_FUNCTION_AUTH_AUDIENCE" in parse(MAIN)["outputs"]


def test_the_dead_letter_alert_points_at_the_dead_letter_tools_and_the_runbook() -> None:
    alerts = (REPO_ROOT / "infra" / "modules" / "alerts.bicep").read_text(encoding="utf-8")
    assert "`orders dlq list`" in alerts and "docs/operations.md" in alerts
    assert (REPO_ROOT / "docs" / "operations.md").is_file()


DASHBOARDS = "modules/dashboards.bicep"


def test_a_reused_order_id_raises_an_alert_from_the_consumers_counter() -> None:
    alerts = resources_of_type(parse(DASHBOARDS), "Microsoft.Insights/scheduledQueryRules")
    by_measure = {
        r.body["properties"]["criteria"]["allOf"][0].get("metricMeasureColumn"): r for r in alerts
    }
    mismatch = by_measure["mismatches"].body["properties"]
    criterion = mismatch["criteria"]["allOf"][0]

    assert 'name == "orders.mismatches"' in criterion["query"]
    assert criterion["operator"] == "GreaterThan" and criterion["threshold"] == 0
    assert mismatch["severity"] == 1 and "orders dlq list" in mismatch["description"]


def test_a_high_duplicate_ratio_raises_an_alert_with_a_tunable_threshold() -> None:
    alerts = resources_of_type(parse(DASHBOARDS), "Microsoft.Insights/scheduledQueryRules")
    [duplicates] = [
        r.body["properties"]
        for r in alerts
        if r.body["properties"]["criteria"]["allOf"][0].get("metricMeasureColumn")
        == "duplicatePercent"
    ]
    criterion = duplicates["criteria"]["allOf"][0]

    assert (
        '"orders.duplicates"' in criterion["query"] and '"orders.processed"' in criterion["query"]
    )
    assert resolve(DASHBOARDS, criterion["threshold"]) == 20


def test_the_workbook_draws_the_consumer_and_http_counters() -> None:
    workbook = one_resource(parse(DASHBOARDS), "Microsoft.Insights/workbooks").body["properties"]
    text = json.dumps(parse(DASHBOARDS))

    assert workbook["category"] == "workbook"
    assert "orders.dead_lettered" in text and 'startswith \\"orders.http.\\"' in text
    assert "dashboards.bicep" in (INFRA / "main.bicep").read_text(encoding="utf-8")
