"""The official emulators for Docker users: compose file and the Service Bus emulator config.

Nothing here starts a container; the files are checked for shape and against the limits the
official emulators enforce.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from .bicep_model import REPO_ROOT, named_resource, parse, resolve, resources

EMULATORS = REPO_ROOT / "emulators"
CONFIG = EMULATORS / "servicebus" / "config.json"


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EMULATORS / "docker-compose.yml").read_text("utf-8"))
    return loaded


def _config() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(CONFIG.read_text(encoding="utf-8"))
    return loaded


def _orders_queue() -> dict[str, Any]:
    (namespace,) = _config()["UserConfig"]["Namespaces"]
    (queue,) = [q for q in namespace["Queues"] if q["Name"] == "orders"]
    properties: dict[str, Any] = queue["Properties"]
    return properties


def _iso_seconds(duration: str) -> int:
    match = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", duration)
    assert match and duration not in ("P", "PT"), duration
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


# service -> (image, published ports "host:container")
EXPECTED_SERVICES = {
    "servicebus": (
        "mcr.microsoft.com/azure-messaging/servicebus-emulator:latest",
        {"5672:5672", "5300:5300"},
    ),
    "sqlserver": ("mcr.microsoft.com/mssql/server:2022-latest", set()),
    "cosmos": (
        "mcr.microsoft.com/cosmosdb/linux/azure-cosmos-emulator:vnext-latest",
        {"8081:8081", "1234:1234"},
    ),
}


@pytest.mark.parametrize("service", sorted(EXPECTED_SERVICES))
def test_compose_service_image_and_ports(service: str) -> None:
    image, ports = EXPECTED_SERVICES[service]
    spec = _compose()["services"][service]
    assert spec["image"] == image
    assert set(spec.get("ports", [])) == ports


def test_compose_has_exactly_the_expected_services() -> None:
    assert set(_compose()["services"]) == set(EXPECTED_SERVICES)


def test_servicebus_emulator_is_wired_to_sql_server_and_our_config() -> None:
    services = _compose()["services"]
    emulator = services["servicebus"]
    assert emulator["environment"]["SQL_SERVER"] == "sqlserver"
    assert "sqlserver" in emulator["depends_on"]
    (mount,) = emulator["volumes"]
    source, target = mount.split(":")[:2]
    assert target == "/ServiceBus_Emulator/ConfigFiles/Config.json"
    assert (EMULATORS / source).resolve() == CONFIG.resolve()
    # Both containers read the same password, from emulators/.env, never from the compose file.
    for name in ("servicebus", "sqlserver"):
        assert services[name]["environment"]["MSSQL_SA_PASSWORD"].startswith("${MSSQL_SA_PASSWORD")


def test_env_sample_names_every_variable_the_compose_file_needs() -> None:
    compose_text = (EMULATORS / "docker-compose.yml").read_text(encoding="utf-8")
    needed = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", compose_text))
    sample = (EMULATORS / ".env.sample").read_text(encoding="utf-8")
    defined = dict(
        line.split("=", 1) for line in sample.splitlines() if line and not line.startswith("#")
    )
    assert needed == set(defined)
    assert defined["MSSQL_SA_PASSWORD"] == "", "the sample must not ship a usable password"
    assert defined["ACCEPT_EULA"] == "Y"


def _python_compatible(schema: Any) -> Any:
    """The official schema's patterns are ECMA-262: `[\\w-\\.]` there means word chars, `-` and
    `.`, while Python's re rejects it as a bad range. Escape such hyphens; the meaning is kept."""
    if isinstance(schema, dict):
        return {
            key: re.sub(r"(\\[wdsWDS])-", r"\1\\-", value)
            if key == "pattern" and isinstance(value, str)
            else _python_compatible(value)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_python_compatible(item) for item in schema]
    return schema


@pytest.fixture(scope="module")
def config_validator(reference_schemas: Path) -> jsonschema.Draft7Validator:
    path = reference_schemas / "servicebus-emulator" / "Config-schema.json"
    schema = _python_compatible(json.loads(path.read_text(encoding="utf-8")))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_config_validates_against_the_official_schema(
    config_validator: jsonschema.Draft7Validator,
) -> None:
    assert [e.message for e in config_validator.iter_errors(_config())] == []


def test_the_schema_check_rejects_a_config_out_of_limits(
    config_validator: jsonschema.Draft7Validator,
) -> None:
    broken = _config()
    broken["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"]["MaxDeliveryCount"] = 11
    assert not config_validator.is_valid(broken)
    broken = _config()
    broken["UserConfig"]["Namespaces"][0]["Name"] = "orders-ns"
    assert not config_validator.is_valid(broken)


def _entities_with(key: str) -> list[dict[str, Any]]:
    """The Properties of every queue, topic and subscription of the config that set `key`."""
    (namespace,) = _config()["UserConfig"]["Namespaces"]
    entities = [*namespace["Queues"], *namespace["Topics"]]
    entities += [s for topic in namespace["Topics"] for s in topic["Subscriptions"]]
    return [e["Properties"] for e in entities if key in e.get("Properties", {})]


def test_config_is_within_the_emulator_limits_the_schema_only_documents() -> None:
    windows = _entities_with("DuplicateDetectionHistoryTimeWindow")
    locks = _entities_with("LockDuration")
    ttls = _entities_with("DefaultMessageTimeToLive")
    deliveries = _entities_with("MaxDeliveryCount")
    assert _orders_queue() in windows and len(locks) >= 2  # the queues and the subscriptions
    for props in windows:
        assert 5 <= _iso_seconds(props["DuplicateDetectionHistoryTimeWindow"]) <= 5 * 60
    for props in locks:
        assert 5 <= _iso_seconds(props["LockDuration"]) <= 5 * 60
    for props in ttls:
        assert 5 * 60 <= _iso_seconds(props["DefaultMessageTimeToLive"]) <= 60 * 60
    for props in deliveries:
        assert 1 <= props["MaxDeliveryCount"] <= 10


def test_config_keeps_the_behaviour_the_azure_queue_has() -> None:
    """Same semantics as Azure where the emulator allows it (its window is capped at PT5M)."""
    queue = _orders_queue()
    module = "modules/messaging.bicep"
    azure = named_resource(module, "Microsoft.ServiceBus/namespaces/queues", "orders")
    azure_props = azure.body["properties"]
    assert queue["RequiresDuplicateDetection"] is resolve(
        module, azure_props["requiresDuplicateDetection"]
    )
    assert queue["DeadLetteringOnMessageExpiration"] is resolve(
        module, azure_props["deadLetteringOnMessageExpiration"]
    )
    assert queue["MaxDeliveryCount"] == resolve(module, azure_props["maxDeliveryCount"])
    assert queue["RequiresSession"] is resolve(module, azure_props["requiresSession"])


# Config property -> Bicep property, for what both must agree on (the emulator caps the window,
# the lock and the TTL, so those may differ).
SAME_SEMANTICS = {
    "RequiresDuplicateDetection": "requiresDuplicateDetection",
    "RequiresSession": "requiresSession",
    "DeadLetteringOnMessageExpiration": "deadLetteringOnMessageExpiration",
    "MaxDeliveryCount": "maxDeliveryCount",
}
MESSAGING = "modules/messaging.bicep"
SB = "Microsoft.ServiceBus/namespaces"


def _azure_entity(type_: str, name: str) -> dict[str, Any]:
    properties: dict[str, Any] = named_resource(MESSAGING, type_, name).body["properties"]
    return {key: resolve(MESSAGING, value) for key, value in properties.items()}


@pytest.mark.parametrize(
    ("kind", "name", "topic"),
    [
        ("queues", "order-status", None),
        ("queues", "order-status-sessions", None),
        ("topics", "order-events", None),
        ("subscriptions", "billing", "order-events"),
        ("subscriptions", "shipping", "order-events"),
    ],
)
def test_the_fanout_and_status_entities_behave_as_in_azure(
    kind: str, name: str, topic: str | None
) -> None:
    """What the code runs against locally (this config, our emulator) is what Azure deploys."""
    (namespace,) = _config()["UserConfig"]["Namespaces"]
    if kind == "subscriptions":
        (parent,) = [t for t in namespace["Topics"] if t["Name"] == topic]
        candidates = parent["Subscriptions"]
        type_ = f"{SB}/topics/subscriptions"
    else:
        candidates = namespace["Queues" if kind == "queues" else "Topics"]
        type_ = f"{SB}/{kind}"
    (local,) = [e["Properties"] for e in candidates if e["Name"] == name]
    azure = _azure_entity(type_, name)
    compared = {key: bicep for key, bicep in SAME_SEMANTICS.items() if key in local}
    assert compared, f"{name}: nothing to compare"
    for key, bicep in compared.items():
        assert local[key] == azure[bicep], (name, key)


def test_every_azure_messaging_entity_exists_in_the_emulator_config() -> None:
    (namespace,) = _config()["UserConfig"]["Namespaces"]
    local = {(f"{SB}/queues", q["Name"]) for q in namespace["Queues"]}
    local |= {(f"{SB}/topics", t["Name"]) for t in namespace["Topics"]}
    local |= {
        (f"{SB}/topics/subscriptions", s["Name"])
        for t in namespace["Topics"]
        for s in t["Subscriptions"]
    }
    doc = parse(MESSAGING)
    azure = {
        (r.type, resolve(MESSAGING, r.body["name"]))
        for r in resources(doc)
        if r.type.startswith(f"{SB}/") and not r.existing and not r.type.endswith("/rules")
    }
    assert len(azure) == 6
    assert azure <= local, azure - local


def test_each_consumer_subscription_keeps_other_subscriptions_delayed_retries_out() -> None:
    """A delayed retry's copy goes to the topic and names its subscription: in Azure each
    consumer's subscription replaces its default rule with the filter that keeps the others'
    copies out, and the emulator config gives each generated subscription the same filter."""
    from exactly_once.delayed_retries import subscription_filter
    from orders.service.registry import subscription_consumers

    rules = [r for r in resources(parse(MESSAGING)) if r.type == f"{SB}/topics/subscriptions/rules"]
    assert rules and all(rule.body["name"] == "$Default" for rule in rules)  # not beside it
    assert all(rule.body["properties"]["filterType"] == "SqlFilter" for rule in rules)
    text = (REPO_ROOT / "infra" / MESSAGING).read_text(encoding="utf-8")
    expression = subscription_filter("${consumer.name}").replace("'", "\\'")
    assert f"sqlExpression: '{expression}'" in text
    (namespace,) = _config()["UserConfig"]["Namespaces"]
    (topic,) = namespace["Topics"]
    local_rules = {s["Name"]: s.get("Rules", []) for s in topic["Subscriptions"]}
    for spec in subscription_consumers():
        [local] = local_rules[spec.name]
        assert local["Properties"] == {
            "FilterType": "Sql",
            "SqlFilter": {"SqlExpression": subscription_filter(spec.name)},
        }


def _derived_config(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "derived_config.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_consumer_subscriptions_are_generated_from_the_registry() -> None:
    """`make derived-config` has run since the registry last changed: the checked-in files are
    what it writes, one subscription and one setting per consumer on the topic."""
    from orders.service.registry import subscription_consumers

    result = _derived_config("--check")
    assert result.returncode == 0, result.stderr
    (namespace,) = _config()["UserConfig"]["Namespaces"]
    (topic,) = namespace["Topics"]
    names = [s["Name"] for s in topic["Subscriptions"]]
    assert {spec.name for spec in subscription_consumers()} <= set(names)
    sample = json.loads((REPO_ROOT / "local.settings.sample.json").read_text(encoding="utf-8"))
    for spec in subscription_consumers():
        assert sample["Values"][spec.setting] == spec.name


def test_a_stale_config_fails_the_check_and_is_regenerated(tmp_path: Path) -> None:
    config = _config()
    (topic,) = config["UserConfig"]["Namespaces"][0]["Topics"]
    topic["Subscriptions"] = [s for s in topic["Subscriptions"] if s["Name"] != "billing"]
    stale = tmp_path / "config.json"
    stale.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    sample = tmp_path / "local.settings.sample.json"
    shutil.copy2(REPO_ROOT / "local.settings.sample.json", sample)
    files = ("--config", str(stale), "--local-settings", str(sample))

    checked = _derived_config(*files, "--check")
    written = _derived_config(*files)

    assert checked.returncode == 1 and "make derived-config" in checked.stderr
    assert written.returncode == 0, written.stderr
    assert stale.read_text(encoding="utf-8") == CONFIG.read_text(encoding="utf-8")
