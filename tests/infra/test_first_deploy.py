"""A default `azd up` deploys a system in which every trigger works or is off on purpose (issue 23).

Billing without a payment service is disabled by an app setting and the outputs say so; the
tools' duplicate window comes from the entities' own parameter; the alerts read what the code
emits (`ALERT` lines, the dispatcher's failures and lag) on the GA API version; the Cosmos DB
account is never changed by two modules at once; the private DNS zones follow the cloud.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from function_index import indexed_functions
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from .bicep_model import (
    INFRA,
    MAIN,
    REPO_ROOT,
    module_calls,
    one_resource,
    parse,
    resolve,
    resources,
    resources_of_type,
)

FUNCTION = "modules/functionapp.bicep"
DASHBOARDS = "modules/dashboards.bicep"
NETWORK = "modules/network.bicep"
SCHEDULED_QUERY_RULES = "Microsoft.Insights/scheduledQueryRules"
BILLING_DISABLED = "AzureWebJobs.bill_order.Disabled"


def _call(relative: str) -> dict[str, Any]:
    (call,) = [c for c in module_calls(parse(MAIN)).values() if c["detail"]["path"] == relative]
    found: dict[str, Any] = call
    return found


def _app_settings() -> dict[str, Any]:
    site = one_resource(parse(FUNCTION), "Microsoft.Web/sites")
    entries = resolve(FUNCTION, site.body["properties"]["siteConfig"]["appSettings"])
    return {entry["name"]: entry["value"] for entry in entries}


def _function_names() -> set[str]:
    # As the host indexes them: the consumers' triggers are declared in a loop over the registry.
    return set(indexed_functions())


# --- billing without a payment service ---------------------------------------------------------


def test_billing_is_disabled_by_app_setting_while_payments_url_is_empty() -> None:
    # The setting names the billing function of function_app.py, which the host then skips.
    assert "bill_order" in _function_names()
    value = _app_settings()[BILLING_DISABLED]["operator"]
    assert value["type"] == "conditional"
    assert value["operands"] == {
        "condition": "billingEnabled",
        "true_value": "false",
        "false_value": "true",
    }
    # main.bicep: billingEnabled = !empty(paymentsUrl), and paymentsUrl defaults to ''.
    main = parse(MAIN)
    assert main["parameters"]["paymentsUrl"]["default"] == ""
    enabled = main["variables"]["billingEnabled"]["value"]["operator"]
    assert enabled["type"] == "not"
    assert enabled["operands"]["bool_value"] == {
        "function": {"type": "empty", "parameters": {"item_to_test": "paymentsUrl"}}
    }
    params = _call(FUNCTION)["config"]["params"]
    assert params["billingEnabled"] == "billingEnabled"
    assert params["paymentsUrl"] == "paymentsUrl"


def test_the_outputs_say_whether_billing_runs() -> None:
    """azd keeps outputs in the environment: the postprovision hook reads BILLING_ENABLED and
    prints the billing-disabled note (tests/infra/test_tooling.py runs it)."""
    output = parse(MAIN)["outputs"]["BILLING_ENABLED"]["value"]["operator"]["operands"]
    assert output == {"condition": "billingEnabled", "true_value": "true", "false_value": "false"}
    hook = (INFRA / "scripts" / "write_local_settings.py").read_text(encoding="utf-8")
    assert "BILLING_ENABLED" in hook and BILLING_DISABLED in hook


# --- one duplicate window for the entities and the tools ---------------------------------------


def test_the_tools_window_comes_from_the_entities_parameter() -> None:
    setting = _app_settings()["ORDERS_DUPLICATE_WINDOW_SECONDS"]
    assert setting == {
        "function": {"type": "string", "parameters": {"value_to_convert": "duplicateWindowSeconds"}}
    }
    assert _call(FUNCTION)["config"]["params"]["duplicateWindowSeconds"] == (
        "duplicateWindowSeconds"
    )
    # The seconds are the ISO 8601 parameter the queues and the topic get, added to the epoch.
    main = parse(MAIN)
    seconds = main["variables"]["duplicateWindowSeconds"]["value"]["function"]
    assert seconds["type"] == "date_time_to_epoch"
    added = seconds["parameters"]["date_time"]["function"]
    assert added["type"] == "date_time_add"
    assert added["parameters"]["base"] == "1970-01-01T00:00:00Z"
    assert added["parameters"]["duration"] == "duplicateDetectionHistoryTimeWindow"
    messaging = _call("modules/messaging.bicep")["config"]["params"]
    assert messaging["duplicateDetectionHistoryTimeWindow"] == "duplicateDetectionHistoryTimeWindow"
    # The laptop tools find it in the azd environment too.
    assert "ORDERS_DUPLICATE_WINDOW_SECONDS" in main["outputs"]


def test_the_records_retention_comes_from_the_entities_settings() -> None:
    """ORDERS_LOCK_DURATION_SECONDS, ORDERS_MAX_DELIVERY_COUNT and ORDERS_MESSAGE_TTL_SECONDS are
    the values messaging.bicep gives the entities, never copies of them (issue 34)."""
    settings = _app_settings()
    params = _call(FUNCTION)["config"]["params"]
    for setting, param in (
        ("ORDERS_LOCK_DURATION_SECONDS", "lockDurationSeconds"),
        ("ORDERS_MAX_DELIVERY_COUNT", "maxDeliveryCount"),
        ("ORDERS_MESSAGE_TTL_SECONDS", "messageTimeToLiveSeconds"),
    ):
        assert settings[setting] == {
            "function": {"type": "string", "parameters": {"value_to_convert": param}}
        }
    assert params["maxDeliveryCount"] == "maxDeliveryCount"
    assert params["messageTimeToLiveSeconds"] == "messageTimeToLiveSeconds"
    assert json.dumps(params["lockDurationSeconds"]).count("lockDurationSeconds") == 1
    assert "messaging" in json.dumps(params["lockDurationSeconds"])
    messaging = _call("modules/messaging.bicep")["config"]["params"]
    assert messaging["maxDeliveryCount"] == "maxDeliveryCount"
    assert messaging["messageTimeToLive"] == "messageTimeToLive"
    main = parse(MAIN)
    seconds = main["variables"]["messageTimeToLiveSeconds"]["value"]["function"]
    assert seconds["type"] == "date_time_to_epoch"
    added = seconds["parameters"]["date_time"]["function"]["parameters"]
    assert (added["base"], added["duration"]) == ("1970-01-01T00:00:00Z", "messageTimeToLive")
    lock = parse("modules/messaging.bicep")["outputs"]["lockDurationSeconds"]["value"]["function"]
    assert lock["type"] == "date_time_to_epoch"
    added = lock["parameters"]["date_time"]["function"]["parameters"]
    assert (added["base"], added["duration"]) == ("1970-01-01T00:00:00Z", "lockDuration")


def test_the_window_setting_is_bounded_as_the_broker_bounds_it() -> None:
    decorators = parse(FUNCTION)["parameters"]["duplicateWindowSeconds"]["decorators"]
    text = json.dumps(decorators)
    # PT20S .. P7D (FACTS.md), in seconds.
    assert "20" in text and "604800" in text


# --- alerts: the GA API, and on what the code emits ---------------------------------------------


def test_scheduled_query_rules_use_the_ga_api_version() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in INFRA.rglob("*.bicep"))
    versions = set(re.findall(r"Microsoft\.Insights/scheduledQueryRules@([\w-]+)", text))
    assert versions == {"2023-12-01"}


def _rules() -> dict[str, dict[str, Any]]:
    return {
        rule.symbol: rule.body["properties"]
        for rule in resources_of_type(parse(DASHBOARDS), SCHEDULED_QUERY_RULES)
    }


def _alert_prefixed_log_messages() -> list[str]:
    found = []
    for path in (REPO_ROOT / "src" / "orders").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and value.startswith("ALERT "):
                found.append(value)
    return found


def test_every_alert_log_line_raises_an_alert() -> None:
    messages = _alert_prefixed_log_messages()
    # A reused orderId, a refused payment, an event no stored order vouches for.
    assert len(messages) >= 3
    rule = _rules()["alertLinesAlert"]
    (criterion,) = rule["criteria"]["allOf"]
    assert criterion["query"] == 'traces | where message startswith "ALERT "'
    assert criterion["timeAggregation"] == "Count"
    assert (criterion["operator"], criterion["threshold"]) == ("GreaterThan", 0)
    assert rule["severity"] == 1 and "orders dlq list" in rule["description"]


def _dispatcher_metric_names() -> set[str]:
    """What the dispatcher's telemetry really exports, recorded through its own class."""
    from orders.observability import DispatcherTelemetry

    reader = InMemoryMetricReader()
    telemetry = DispatcherTelemetry(MeterProvider(metric_readers=[reader]), clock=lambda: 100.0)
    with telemetry.batch_span(1) as span:
        telemetry.attempting({"_ts": 40})
        telemetry.published(span, 1)
        telemetry.failed(span, RuntimeError("x"))
    return _exported(reader)


def _exported(reader: InMemoryMetricReader) -> set[str]:
    """The names of the metrics `reader` collected."""
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def test_dispatcher_failures_and_lag_raise_alerts_on_the_metrics_the_code_emits() -> None:
    emitted = _dispatcher_metric_names()
    assert {"orders.dispatcher.failures", "orders.dispatcher.lag"} <= emitted
    rules = _rules()
    (failures,) = rules["dispatcherFailuresAlert"]["criteria"]["allOf"]
    assert 'name == "orders.dispatcher.failures"' in failures["query"]
    assert (failures["operator"], failures["threshold"]) == ("GreaterThan", 0)
    (lag,) = rules["dispatcherLagAlert"]["criteria"]["allOf"]
    assert 'name == "orders.dispatcher.lag"' in lag["query"]
    assert lag["operator"] == "GreaterThan"
    assert lag["threshold"] == "dispatcherLagThresholdSeconds"
    assert parse(DASHBOARDS)["parameters"]["dispatcherLagThresholdSeconds"]["default"] == 300
    # Every rule is named by main.bicep, so each one is deployed.
    params = _call(DASHBOARDS)["config"]["params"]
    for name in ("alertLinesAlertName", "dispatcherFailuresAlertName", "dispatcherLagAlertName"):
        assert name in params


def _consumer_decision_metrics() -> set[str]:
    """The `*.decisions` counters the registered consumers really export, one decision each."""
    from opentelemetry import trace

    from exactly_once.decisions import Decision, Outcome, Settlement
    from orders.observability import SubscriberTelemetry
    from orders.service.registry import CONSUMERS

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    # The order consumer counts its own `orders.*` metrics (ConsumerTelemetry), the others
    # get the pipeline's `orders.<name>.*`.
    for spec in (spec for spec in CONSUMERS if not spec.instruments_itself):
        telemetry = SubscriberTelemetry(spec.name, meter_provider=provider)
        telemetry.record(
            trace.INVALID_SPAN, Decision(Outcome.PROCESSED, Settlement.COMPLETE, key="o-1")
        )
    return {name for name in _exported(reader) if name.endswith(".decisions")}


def test_the_workbook_draws_the_fanout_counters() -> None:
    """The chart's filter draws every registered consumer's decisions counter (it lists no
    consumer, so a new one needs no change here) and the dispatcher's counters."""
    from orders.service.registry import CONSUMERS

    text = json.dumps(parse(DASHBOARDS))
    assert 'name startswith \\"orders.\\" and name endswith \\".decisions\\"' in text
    emitted = _consumer_decision_metrics()
    instrumented = [spec.name for spec in CONSUMERS if not spec.instruments_itself]
    assert emitted == {f"orders.{name}.decisions" for name in instrumented}
    assert all(name.startswith("orders.") and name.endswith(".decisions") for name in emitted)
    assert "orders.dispatcher.published" in text


# --- one change at a time on the Cosmos DB account ----------------------------------------------


def test_role_assignments_wait_for_the_network_changes_to_the_cosmos_account() -> None:
    roles = _call("modules/roles.bicep")
    network = _call(NETWORK)
    assert network["condition"] == "vnetEnabled"
    assert "network" in roles["config"]["dependsOn"]


# --- private DNS zones for the cloud being deployed to ------------------------------------------


def test_private_dns_zones_are_derived_not_public_cloud_literals() -> None:
    # Neither a variable nor a resource names a public-cloud suffix (descriptions may).
    doc = parse(NETWORK)
    code = json.dumps([doc["variables"], doc["resources"]])
    for public_cloud in ("documents.azure.com", "servicebus.windows.net", "core.windows.net"):
        assert public_cloud not in code, public_cloud
    zones = parse(NETWORK)["variables"]["zones"]["value"]
    assert zones == [
        "privatelink.blob.${environment().suffixes.storage}",
        "privatelink.${cosmosDnsSuffix}",
        "privatelink.${serviceBusDnsSuffix}",
    ]
    params = _call(NETWORK)["config"]["params"]
    assert "endpoint" in json.dumps(params["cosmosEndpoint"])
    assert "fullyQualifiedNamespace" in json.dumps(params["serviceBusFullyQualifiedNamespace"])
    # Every zone resource is one of these three, each linked to the VNet.
    zone_resources = [
        r for r in resources(parse(NETWORK)) if r.type == "Microsoft.Network/privateDnsZones"
    ]
    # One loop over `zones` (resources() expands it into one resource per zone).
    assert {r.symbol.split("[")[0] for r in zone_resources} == {"dnsZones"}
    assert len(zone_resources) == len(zones)


def _suffix_as_network_bicep_derives_it(endpoint: str) -> str:
    """network.bicep's expressions, step by step: host of the endpoint, then all after its first
    label (split/substring/indexOf as Bicep evaluates them)."""
    host = endpoint.split("//")[1].split("/")[0].split(":")[0] if "//" in endpoint else endpoint
    return host[host.index(".") + 1 :]


def test_the_derivation_gives_each_clouds_private_link_zone() -> None:
    expected = {
        "https://acct.documents.azure.com:443/": "privatelink.documents.azure.com",
        "https://acct.documents.azure.us:443/": "privatelink.documents.azure.us",
        "https://acct.documents.azure.cn:443/": "privatelink.documents.azure.cn",
        "sb-x.servicebus.windows.net": "privatelink.servicebus.windows.net",
        "sb-x.servicebus.usgovcloudapi.net": "privatelink.servicebus.usgovcloudapi.net",
        "sb-x.servicebus.chinacloudapi.cn": "privatelink.servicebus.chinacloudapi.cn",
    }
    for endpoint, zone in expected.items():
        assert f"privatelink.{_suffix_as_network_bicep_derives_it(endpoint)}" == zone
    variables = parse(NETWORK)["variables"]
    text = json.dumps(variables)
    assert '"cosmosEndpoint"' in text and '"serviceBusFullyQualifiedNamespace"' in text


# --- sessions mode ------------------------------------------------------------------------------


def test_sessions_mode_sets_its_own_concurrency() -> None:
    host = json.loads((REPO_ROOT / "host.json").read_text(encoding="utf-8"))
    service_bus = host["extensions"]["serviceBus"]
    # A session-enabled trigger ignores maxConcurrentCalls: the same per-instance concurrency.
    assert service_bus["maxConcurrentSessions"] == service_bus["maxConcurrentCalls"]
    assert service_bus["sessionIdleTimeout"] == "00:00:02"


# --- the walkthrough in infra/README.md says what the code does ---------------------------------


def _readme_section(title: str) -> str:
    text = (INFRA / "README.md").read_text(encoding="utf-8")
    start = text.index(f"### {title}\n")
    end = text.index("\n### ", start + 1)
    return text[start:end]


def test_the_first_deploy_walkthrough_prints_what_the_hook_prints() -> None:
    import sys

    sys.path.insert(0, str(INFRA / "scripts"))
    try:
        import write_local_settings  # type: ignore[import-not-found]  # a script, not a module
    finally:
        sys.path.remove(str(INFRA / "scripts"))
    section = _readme_section("First deploy")
    assert f"note: {write_local_settings.BILLING_DISABLED_NOTE}\n" in section


def test_the_walkthrough_names_every_alert_the_bicep_deploys() -> None:
    section = _readme_section("First deploy")
    main = (INFRA / "main.bicep").read_text(encoding="utf-8")
    abbreviations = json.loads((INFRA / "abbreviations.json").read_text(encoding="utf-8"))
    deployed = re.findall(r"\$\{abbrs\.(insights\w+)\}([\w-]+)-\$\{resourceToken\}", main)
    alerts = {
        f"{abbreviations[kind]}{name}-*"
        for kind, name in deployed
        if kind in ("insightsMetricAlerts", "insightsScheduledQueryRules")
    }
    assert len(alerts) == 6
    for alert in alerts:
        assert f"| `{alert}`" in section, alert


def test_the_walkthrough_commands_use_options_the_cli_has() -> None:
    from typer.testing import CliRunner

    from orders.cli import app

    section = _readme_section("First deploy")
    runner = CliRunner()
    for command, options in (
        ("load", ("--manifest", "--orders")),
        ("verify", ("--manifest", "--no-fanout")),
    ):
        assert f".venv/bin/orders {command} " in section
        help_text = runner.invoke(app, [command, "--help"]).output
        for option in options:
            assert option in help_text, (command, option)
