"""azd wiring: azure.yaml, the parameter file and the outputs that become azd env values."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from .bicep_model import DEPLOYED_ENTITY_NAMES, INFRA, MAIN, REPO_ROOT, parse


def _azure_yaml() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO_ROOT / "azure.yaml").read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def azd_validator(reference_schemas: Path) -> jsonschema.Draft201909Validator:
    schema = json.loads((reference_schemas / "azd" / "azure.yaml.schema.json").read_text("utf-8"))
    jsonschema.Draft201909Validator.check_schema(schema)
    return jsonschema.Draft201909Validator(schema)


def test_azure_yaml_validates_against_azds_schema(
    azd_validator: jsonschema.Draft201909Validator,
) -> None:
    errors = [e.message for e in azd_validator.iter_errors(_azure_yaml())]
    assert errors == []


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda d: d.update(name="Orders_App"), "name must be lower-case letters, digits, hyphens"),
        (lambda d: d["services"]["api"].pop("host"), "a service needs a host"),
        (lambda d: d["services"]["api"].update(image="x"), "a function takes project OR image"),
    ],
)
def test_the_schema_check_rejects_a_broken_azure_yaml(
    azd_validator: jsonschema.Draft201909Validator, mutate: Any, why: str
) -> None:
    broken = copy.deepcopy(_azure_yaml())
    mutate(broken)
    assert not azd_validator.is_valid(broken), why


def test_azure_yaml_deploys_the_repo_root_as_a_python_function() -> None:
    doc = _azure_yaml()
    assert doc["services"] == {"api": {"project": ".", "language": "python", "host": "function"}}
    assert doc.get("infra", {}).get("path", "infra") == "infra"
    assert doc.get("infra", {}).get("module", "main") == "main"
    # The root is what gets packaged: the app must be there, and .funcignore must keep infra out.
    assert (REPO_ROOT / "function_app.py").is_file()
    funcignore = (REPO_ROOT / ".funcignore").read_text(encoding="utf-8").split()
    assert {"infra", "emulators", "tests", "azure.yaml"} <= set(funcignore)


def test_parameter_file_maps_azd_variables_onto_main_parameters() -> None:
    values = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))["parameters"]
    params = parse(MAIN)["parameters"]
    assert set(values) <= set(params), set(values) - set(params)
    required = {name for name, p in params.items() if p["default"] is None}
    assert required <= set(values), required - set(values)
    mapped = {name: v["value"] for name, v in values.items()}
    assert mapped["environmentName"] == "${AZURE_ENV_NAME}"
    assert mapped["location"] == "${AZURE_LOCATION}"
    assert mapped["principalId"] == "${AZURE_PRINCIPAL_ID}"
    for name, value in mapped.items():
        assert re.fullmatch(r"\$\{[A-Z][A-Z0-9_]*(=[^}]*)?\}", value), (name, value)


# What the CLI and the load script read after `azd up` (`azd env get-value NAME`).
LAPTOP_OUTPUTS = {
    "AZURE_SERVICEBUS_FULLY_QUALIFIED_NAMESPACE",
    "ORDERS_QUEUE",
    "COSMOS_ENDPOINT",
    "COSMOS_DATABASE",
    "COSMOS_CONTAINER",
    "COSMOS_IDEMPOTENCY_CONTAINER",
    "AZURE_FUNCTION_APP_NAME",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "AZURE_RESOURCE_GROUP",
    "AZURE_LOCATION",
    "AZURE_TENANT_ID",
}


def test_outputs_give_the_laptop_what_it_needs() -> None:
    outputs = parse(MAIN)["outputs"]
    assert set(outputs) >= LAPTOP_OUTPUTS, LAPTOP_OUTPUTS - set(outputs)
    # azd does not keep mixed-case output names reliably; every output is UPPER_SNAKE.
    for name in outputs:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name), name
    # On a laptop AZURE_CLIENT_ID would aim DefaultAzureCredential at the function's identity.
    assert "AZURE_CLIENT_ID" not in outputs
    # No secret ever leaves the deployment as an output.
    for name, output in outputs.items():
        assert not any(d["type"] == "secure" for d in output["decorators"]), name


@pytest.mark.parametrize(("output", "deployed"), sorted(DEPLOYED_ENTITY_NAMES.items()))
def test_entity_outputs_name_what_was_deployed(output: str, deployed: str) -> None:
    from .bicep_model import resolve

    assert resolve(MAIN, parse(MAIN)["outputs"][output]["value"]) == deployed


def test_the_subscriptions_output_names_every_consumer_subscription_deployed() -> None:
    """One output for the array (outputs cannot be named in a loop): each element the setting
    and the subscription messaging.bicep's loop deployed for it."""
    from .bicep_model import DEPLOYED_SUBSCRIPTIONS, resolve

    found = resolve(MAIN, parse(MAIN)["outputs"]["ORDER_EVENTS_SUBSCRIPTIONS"]["value"])
    assert {entry["setting"]: entry["name"] for entry in found} == DEPLOYED_SUBSCRIPTIONS


def test_status_sessions_is_an_off_by_default_parameter_the_app_setting_follows() -> None:
    param = parse(MAIN)["parameters"]["statusSessions"]
    assert param["type"] == "bool" and param["default"] is False
    values = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))["parameters"]
    assert values["statusSessions"]["value"] == "${STATUS_SESSIONS=false}"
    from .bicep_model import module_calls

    (call,) = [
        c
        for c in module_calls(parse(MAIN)).values()
        if c["detail"]["path"] == "modules/functionapp.bicep"
    ]
    assert call["config"]["params"]["statusSessions"] == "statusSessions"
    assert call["config"]["params"]["statusQueueName"] == "appStatusQueueName"
