"""One source of truth for setting names: what the code reads is what the Bicep sets.

The code declares the names in `orders.settings.APP_SETTING_NAMES` (a frozenset of the settings
the Azure deployment sets). The function app's app settings in infra/modules/functionapp.bicep
must be exactly those, plus the settings the Functions host itself reads for its storage.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from .bicep_model import (
    DEPLOYED_ENTITY_NAMES,
    DEPLOYED_SUBSCRIPTIONS,
    REPO_ROOT,
    one_resource,
    parse,
    resolve,
    resources,
)

FUNCTION_MODULE = "modules/functionapp.bicep"

# What issue 4 lists; kept here too so the Bicep is checked even before the code declares it.
ISSUE_SETTINGS = frozenset(
    {
        "ServiceBusConnection__fullyQualifiedNamespace",
        "ServiceBusConnection__credential",
        "ServiceBusConnection__clientId",
        "ORDERS_QUEUE",
        "COSMOS_ENDPOINT",
        "COSMOS_DATABASE",
        "COSMOS_CONTAINER",
        "COSMOS_IDEMPOTENCY_CONTAINER",
        "AZURE_CLIENT_ID",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
    }
)
# What issue 13 adds: the payment service billing charges through (empty until configured), the
# fan-out's topic, subscriptions and containers, and the Cosmos DB trigger's identity-based
# connection `CosmosConnection` (the outbox dispatcher; read by the Functions host only, but
# declared by the code like the `ServiceBusConnection__*` trio).
ISSUE_13_SETTINGS = frozenset(
    {
        "PAYMENTS_URL",
        "ORDER_EVENTS_TOPIC",
        "BILLING_SUBSCRIPTION",
        "SHIPPING_SUBSCRIPTION",
        "COSMOS_INBOX_CONTAINER",
        "COSMOS_LEASES_CONTAINER",
        "CosmosConnection__accountEndpoint",
        "CosmosConnection__credential",
        "CosmosConnection__clientId",
    }
)
# What issue 14 adds: the status queue and its mode (versions alone, or sessions).
ISSUE_14_SETTINGS = frozenset({"STATUS_QUEUE", "STATUS_SESSIONS"})
# What issue 23 adds: the tools' duplicate-detection window, from the entities' own parameter.
ISSUE_23_SETTINGS = frozenset({"ORDERS_DUPLICATE_WINDOW_SECONDS"})
# What issue 34 adds: the entities' lock duration, MaxDeliveryCount and message TTL, from the
# values messaging.bicep gives them, which size how long the exactly-once records are kept.
ISSUE_34_SETTINGS = frozenset(
    {"ORDERS_LOCK_DURATION_SECONDS", "ORDERS_MAX_DELIVERY_COUNT", "ORDERS_MESSAGE_TTL_SECONDS"}
)
# What issue 46 adds: from when a bare eventId (published before the nonce) is refused.
ISSUE_46_SETTINGS = frozenset({"BARE_EVENT_ID_CUTOVER"})

# What issue 43 adds: the consumers' delayed retries (how many, how far apart), set where the
# Bicep's parameters say, so a deployment can change them without a release.
ISSUE_43_SETTINGS = frozenset({"ORDERS_DELAYED_RETRIES", "ORDERS_DELAYED_RETRY_SECONDS"})
# Local only: keys and connection strings exist for the emulators, never in Azure.
EMULATOR_ONLY = frozenset(
    {"COSMOS_KEY", "ServiceBusConnection", "CosmosConnection", "PAYMENTS_TOKEN"}
)
# Read with defaults by the HTTP API, billing and the console; Azure may leave them unset.
OPTIONAL = frozenset(
    {
        "IDEMPOTENCY_SCOPE",
        "IDEMPOTENCY_TTL_SECONDS",
        "BILLING_LEASE_SECONDS",
        "ORDERS_CONSOLE_ENABLED",
        "ORDERS_CONSOLE_SUBSCRIPTIONS",
    }
)
BILLING_DISABLED = "AzureWebJobs.bill_order.Disabled"
# Read by the Functions host (its own storage through the identity) and by the Python worker
# (PYTHON_ENABLE_OPENTELEMETRY: join the host's trace under telemetryMode OpenTelemetry), not by
# our code.
HOST_ONLY = frozenset(
    {
        "AzureWebJobsStorage__blobServiceUri",
        "AzureWebJobsStorage__credential",
        "AzureWebJobsStorage__clientId",
        "PYTHON_ENABLE_OPENTELEMETRY",
        # The host skips this function's trigger while it is 'true' (billing without a payment
        # service, issue 23); the function's name is function_app.py's `bill_order`.
        BILLING_DISABLED,
    }
)
# Set by the Functions platform itself (WEBSITE_AUTH_ENABLED by App Service authentication, for
# one); the code may read them without declaring them.
PLATFORM_PREFIXES = ("WEBSITE_", "FUNCTIONS_", "AZURE_FUNCTIONS_", "PYTHON_")
# Flex Consumption rejects these: the runtime comes from functionAppConfig.
FORBIDDEN_ON_FLEX = frozenset({"FUNCTIONS_WORKER_RUNTIME", "FUNCTIONS_EXTENSION_VERSION"})


def bicep_app_settings() -> dict[str, object]:
    site = one_resource(parse(FUNCTION_MODULE), "Microsoft.Web/sites")
    # The fixed settings concatenated with one per consumer subscription (a loop).
    entries = resolve(FUNCTION_MODULE, site.body["properties"]["siteConfig"]["appSettings"])
    assert isinstance(entries, list), entries
    names = [entry["name"] for entry in entries]
    assert len(names) == len(set(names)), f"duplicate app settings: {sorted(names)}"
    return {entry["name"]: entry["value"] for entry in entries}


def code_setting_names() -> frozenset[str]:
    try:
        settings = importlib.import_module("orders.settings")
        names = settings.APP_SETTING_NAMES
        # Each registered consumer's `<NAME>_SUBSCRIPTION` comes from the registry.
        names = importlib.import_module("orders.service.registry").app_setting_names()
    except (ImportError, AttributeError) as exc:
        pytest.fail(
            "orders.settings.APP_SETTING_NAMES is missing: src/orders/settings.py must declare the "
            "frozenset of app setting names the Azure deployment sets, so this test can hold the "
            f"Bicep to it ({type(exc).__name__}: {exc})"
        )
    assert isinstance(names, frozenset), "APP_SETTING_NAMES must be a frozenset of str"
    assert all(isinstance(n, str) for n in names)
    return names


def test_bicep_sets_the_settings_issues_4_13_14_23_34_43_and_46_list() -> None:
    expected = (
        ISSUE_SETTINGS
        | ISSUE_13_SETTINGS
        | ISSUE_14_SETTINGS
        | ISSUE_23_SETTINGS
        | ISSUE_34_SETTINGS
        | ISSUE_46_SETTINGS
        | ISSUE_43_SETTINGS
    )
    assert set(bicep_app_settings()) - HOST_ONLY == expected


def test_bicep_sets_exactly_what_the_code_reads_in_azure() -> None:
    declared = code_setting_names() - HOST_ONLY
    in_bicep = set(bicep_app_settings()) - HOST_ONLY
    required = declared - EMULATOR_ONLY - OPTIONAL
    assert required - in_bicep == set(), "the code reads these but the Bicep does not set them"
    assert in_bicep - (declared - EMULATOR_ONLY) == set(), (
        "the Bicep sets these but no code reads them"
    )


def test_no_emulator_setting_or_flex_forbidden_setting_in_azure() -> None:
    names = set(bicep_app_settings())
    assert names & EMULATOR_ONLY == set()
    assert names & FORBIDDEN_ON_FLEX == set()


def test_identity_based_values() -> None:
    settings = bicep_app_settings()
    assert settings["ServiceBusConnection__credential"] == "managedidentity"
    assert settings["CosmosConnection__credential"] == "managedidentity"
    assert settings["AzureWebJobsStorage__credential"] == "managedidentity"
    # The trigger watches the same account the app writes to.
    assert settings["CosmosConnection__accountEndpoint"] == settings["COSMOS_ENDPOINT"]
    assert settings["CosmosConnection__accountEndpoint"] == "cosmosEndpoint"
    for name in (
        "ServiceBusConnection__clientId",
        "CosmosConnection__clientId",
        "AzureWebJobsStorage__clientId",
        "AZURE_CLIENT_ID",
    ):
        assert settings[name] == "identityClientId", name
    assert settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] == (
        "ClientId=${identityClientId};Authorization=AAD"
    )
    # The worker joins the host's OpenTelemetry trace (host.json telemetryMode) instead of
    # configuring a second exporter: our own configure_monitoring() is the only exporter.
    assert settings["PYTHON_ENABLE_OPENTELEMETRY"] == "true"
    assert "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY" not in settings


@pytest.mark.parametrize(("name", "deployed"), sorted(DEPLOYED_ENTITY_NAMES.items()))
def test_entity_names_reach_the_app(name: str, deployed: str) -> None:
    assert resolve(FUNCTION_MODULE, bicep_app_settings()[name]) == deployed


# --- what the source reads --------------------------------------------------------------------


def _source_files() -> list[Path]:
    files = sorted((REPO_ROOT / "src" / "orders").rglob("*.py"))
    function_app = REPO_ROOT / "function_app.py"
    return [*files, function_app] if function_app.is_file() else files


# A setting name: UPPER_SNAKE with at least one underscore, or a Functions connection prefix.
SETTING_NAME = re.compile(r"^(?:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Za-z]+Connection(?:__\w+)?)$")
# Callees that read one setting by name: os.environ.get / os.getenv / env.get and the small
# accessor helpers settings modules define (settings.py's `optional`).
READER_CALLEES = frozenset(
    {"get", "getenv", "optional", "required", "require", "_optional", "_required"}
)


def _environ_reads(tree: ast.AST) -> tuple[set[str], dict[str, set[str]]]:
    """Setting names the code reads, and the trigger `connection=` names it binds (each with the
    decorators that bind it, e.g. `cosmos_db_trigger`)."""
    names: set[str] = set()
    connections: dict[str, set[str]] = {}

    def literal(node: ast.AST | None) -> str | None:
        return (
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        )

    def callee_name(node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute):
            return node.attr
        return node.id if isinstance(node, ast.Name) else None

    def is_environ(node: ast.AST) -> bool:
        return callee_name(node) in ("environ", "env")

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_environ(node.value):
            name = literal(node.slice)
            if name and SETTING_NAME.match(name):
                names.add(name)
        elif isinstance(node, ast.Call):
            if callee_name(node.func) in READER_CALLEES and node.args:
                name = literal(node.args[0])
                if name and SETTING_NAME.match(name):
                    names.add(name)
            for keyword in node.keywords:
                if keyword.arg == "connection":
                    name = literal(keyword.value)
                    if name:
                        connections.setdefault(name, set()).add(callee_name(node.func) or "")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # Binding expressions such as queue_name="%ORDERS_QUEUE%" resolve from app settings.
            names.update(re.findall(r"^%([A-Za-z_][A-Za-z0-9_]*)%$", node.value))
    return names, connections


def test_emulator_only_and_optional_names_agree_with_the_code() -> None:
    code_setting_names()
    settings = importlib.import_module("orders.settings")
    for constant, ours in (
        ("EMULATOR_ONLY_SETTING_NAMES", EMULATOR_ONLY),
        ("OPTIONAL_SETTING_NAMES", OPTIONAL),
    ):
        # Both lists must exist in the code: a renamed or deleted constant fails here.
        assert hasattr(settings, constant), f"orders.settings.{constant} is missing"
        assert frozenset(getattr(settings, constant)) == ours, constant


def test_every_setting_the_source_reads_is_declared() -> None:
    files = _source_files()
    if not files:
        pytest.fail("no source to scan: src/orders/ and function_app.py are missing")
    declared = code_setting_names()
    # Names only local tooling reads (emulator switches, test hooks), if the code declares any.
    local_only = frozenset(
        getattr(importlib.import_module("orders.settings"), "LOCAL_SETTING_NAMES", ())
    )
    read: dict[str, set[str]] = {}
    connections: dict[str, set[str]] = {}
    for path in files:
        names, conns = _environ_reads(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for name in names:
            read.setdefault(name, set()).add(str(path.relative_to(REPO_ROOT)))
        for connection, bound_by in conns.items():
            connections.setdefault(connection, set()).update(bound_by)
    undeclared = {
        name: sorted(where)
        for name, where in read.items()
        if name not in declared | local_only | EMULATOR_ONLY | OPTIONAL
        and not name.startswith(PLATFORM_PREFIXES)
    }
    assert read, "the scan found no setting reads at all: it no longer understands the code"
    assert undeclared == {}, "read by the code but not in orders.settings.APP_SETTING_NAMES"
    assert_trigger_connections_are_identity_based(connections, bicep_app_settings())


# The setting that names the service of an identity-based trigger connection, per decorator.
CONNECTION_ENDPOINT = {
    "service_bus_queue_trigger": "fullyQualifiedNamespace",
    "service_bus_topic_trigger": "fullyQualifiedNamespace",
    "cosmos_db_trigger": "accountEndpoint",
}


def assert_trigger_connections_are_identity_based(
    connections: dict[str, set[str]], settings: dict[str, object]
) -> None:
    """Every `connection=` a trigger binds is set in Azure as <name>__<endpoint> with the
    user-assigned managed identity, and is declared by the code."""
    assert connections, "the scan found no trigger connection: it no longer understands the code"
    declared = code_setting_names()
    for connection, bound_by in connections.items():
        unknown = bound_by - set(CONNECTION_ENDPOINT)
        assert not unknown, f"{connection}: no endpoint setting known for {sorted(unknown)}"
        for decorator in bound_by:
            required = {
                f"{connection}__{CONNECTION_ENDPOINT[decorator]}",
                f"{connection}__credential",
                f"{connection}__clientId",
            }
            assert required <= set(settings), (connection, sorted(required - set(settings)))
            assert required <= declared, (connection, sorted(required - declared))
            assert settings[f"{connection}__credential"] == "managedidentity", connection
            assert settings[f"{connection}__clientId"] == "identityClientId", connection


def test_the_connection_check_fails_without_the_cosmos_trigger_settings() -> None:
    """The check above is not vacuous: dropping the Cosmos trigger's endpoint fails it."""
    settings = dict(bicep_app_settings())
    connections = {"CosmosConnection": {"cosmos_db_trigger"}}
    assert_trigger_connections_are_identity_based(connections, settings)
    del settings["CosmosConnection__accountEndpoint"]
    with pytest.raises(AssertionError, match="CosmosConnection__accountEndpoint"):
        assert_trigger_connections_are_identity_based(connections, settings)


def test_the_deployed_names_are_the_codes_defaults() -> None:
    """An app setting left unset (an older deployment, a laptop) still finds what Bicep deploys."""
    from orders.service.registry import CONSUMERS
    from orders.settings import Settings

    defaults = Settings.from_env({"COSMOS_ENDPOINT": "https://127.0.0.1:8081/"})
    assert {
        "ORDERS_QUEUE": defaults.orders_queue,
        "COSMOS_DATABASE": defaults.cosmos_database,
        "COSMOS_CONTAINER": defaults.cosmos_container,
        "COSMOS_IDEMPOTENCY_CONTAINER": defaults.cosmos_idempotency_container,
        "COSMOS_INBOX_CONTAINER": defaults.cosmos_inbox_container,
        "COSMOS_LEASES_CONTAINER": defaults.cosmos_leases_container,
        "ORDER_EVENTS_TOPIC": defaults.order_events_topic,
        **{
            spec.setting: str(spec.source(defaults).subscription)
            for spec in CONSUMERS
            if spec.on_topic
        },
        "STATUS_QUEUE": defaults.status_queue,
        "STATUS_SESSIONS": "true" if defaults.status_sessions else "false",
    } == DEPLOYED_ENTITY_NAMES | DEPLOYED_SUBSCRIPTIONS


def test_the_bicep_subscriptions_are_the_registrys() -> None:
    """main.bicep's consumerSubscriptions array has one element per consumer the app registers on
    the events topic, with the setting the app reads it from: the array drives the Bicep (the
    subscriptions, their roles, the app settings, the outputs), the registry drives the app."""
    from orders.service.registry import subscription_consumers

    array = resolve("main.bicep", "consumerSubscriptions")
    assert [(entry["name"], entry["setting"]) for entry in array] == [
        (spec.name, spec.setting) for spec in subscription_consumers()
    ]
    deployed = [
        resolve("modules/messaging.bicep", r.body["name"])
        for r in resources(parse("modules/messaging.bicep"))
        if r.type == "Microsoft.ServiceBus/namespaces/topics/subscriptions"
    ]
    assert deployed == [entry["name"] for entry in array]
    settings = bicep_app_settings()
    assert all(settings[entry["setting"]] == entry["name"] for entry in array)
    receivers = [
        r
        for r in resources(parse("modules/roles.bicep"))
        if r.type == "Microsoft.Authorization/roleAssignments"
        and str(r.body["scope"]).startswith("consumerSubscriptions[")
    ]
    assert [r.body["scope"] for r in receivers] == [
        f"consumerSubscriptions[{i}]" for i in range(len(array))
    ]
    assert {r.condition for r in receivers} == {"grantUserSubscriptions"}
