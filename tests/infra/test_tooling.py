"""Deployment tooling: azure.yaml's azd version and hook, the packaging rules (.funcignore), the
postprovision script that writes local.settings.json, the GitHub workflows and the dev container.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pathspec
import pytest
import yaml

from .bicep_model import DEPLOYED_ENTITY_NAMES, MAIN, REPO_ROOT, parse

HOOK = REPO_ROOT / "infra" / "scripts" / "write_local_settings.py"
WORKFLOWS = REPO_ROOT / ".github" / "workflows"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# --- azure.yaml ---------------------------------------------------------------------------------


def test_azd_version_is_one_that_honours_funcignore() -> None:
    assert _yaml(REPO_ROOT / "azure.yaml")["requiredVersions"] == {"azd": ">= 1.18.0"}


def test_postprovision_hook_runs_the_local_settings_script_on_every_os() -> None:
    hook = _yaml(REPO_ROOT / "azure.yaml")["hooks"]["postprovision"]
    for os_name, interpreter in (("posix", "python3"), ("windows", "python")):
        entry = hook[os_name]
        assert entry["run"] == f"{interpreter} infra/scripts/write_local_settings.py", os_name
        assert entry["continueOnError"] is False
    assert HOOK.is_file()


# --- .funcignore ----------------------------------------------------------------------------


def _funcignore() -> pathspec.GitIgnoreSpec:
    lines = (REPO_ROOT / ".funcignore").read_text(encoding="utf-8").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.local",
        "run.json",
        "run.manifest.json",
        ".python_packages/lib/site-packages/x.py",
        "build/lib/orders/__init__.py",
        "dist/orders-0.1.0.tar.gz",
        "docs/http-api.md",
        ".venv/bin/python",
        ".venv-checkov/bin/checkov",
        "venv/bin/python",
        "env/bin/python",
        "local.settings.json",
        ".devcontainer/devcontainer.json",
        ".github/workflows/test.yml",
        "infra/main.bicep",
        "tests/infra/test_tooling.py",
        "src/servicebus_emulator/__init__.py",
        # The core's build leftovers (its source is shipped, its metadata is not).
        "packages/exactly-once/src/exactly_once_azure.egg-info/PKG-INFO",
        # What local runs leave behind (issue 23): logs, the SQLite payments, the broker's
        # journal, env.json with the emulator key; the demo's report; coverage data.
        ".orders-local/env.json",
        ".orders-local/logs/worker.log",
        ".orders-local/payments.sqlite3",
        "demo-report.html",
        ".coverage",
        ".coverage.host.1234.567",
        # The dev and checkov locks: the deployment installs requirements.txt only.
        "requirements-dev.txt",
        "requirements-checkov.txt",
        "requirements-checkov.in",
    ],
)
def test_funcignore_leaves_out(path: str) -> None:
    assert _funcignore().match_file(path), path


def test_funcignore_keeps_the_app() -> None:
    """The app and the core it runs on: the core is a distribution of its own that the hash-
    locked requirements.txt cannot name (a folder has no hash), so its source is shipped."""
    spec = _funcignore()
    app = ["function_app.py", "host.json", "requirements.txt"]
    core = REPO_ROOT / "packages" / "exactly-once" / "src" / "exactly_once"
    for package in (REPO_ROOT / "src" / "orders", core):
        app += [
            p.relative_to(REPO_ROOT).as_posix()
            for p in package.rglob("*.py")
            if "__pycache__" not in p.parts
        ]
    assert "packages/exactly-once/src/exactly_once/__init__.py" in app
    assert len(app) > 30
    assert [p for p in app if spec.match_file(p)] == []


# --- the postprovision hook ---------------------------------------------------------------------

OUTPUTS = {
    **DEPLOYED_ENTITY_NAMES,
    "AZURE_SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": "sb-x.servicebus.windows.net",
    "COSMOS_ENDPOINT": "https://cosmos-x.documents.azure.com:443/",
    # A deployment in the sessions mode, so the hook is seen to copy the mode, not a default.
    "STATUS_QUEUE": "order-status-sessions",
    "STATUS_SESSIONS": "true",
    "ORDERS_DUPLICATE_WINDOW_SECONDS": "600",
    # As azd keeps an array output: JSON. A renamed subscription, so the hook is seen to copy it.
    "ORDER_EVENTS_SUBSCRIPTIONS": json.dumps(
        [
            {"name": "billing-eu", "setting": "BILLING_SUBSCRIPTION"},
            {"name": "shipping", "setting": "SHIPPING_SUBSCRIPTION"},
        ]
    ),
    "APPLICATIONINSIGHTS_CONNECTION_STRING": "InstrumentationKey=k;IngestionEndpoint=https://i/",
    "AZURE_FUNCTION_IDENTITY_CLIENT_ID": "must-not-leak-into-local-settings",
}


def _fake_azd(tmp_path: Path, values: dict[str, str], exit_code: int = 0) -> Path:
    """An `azd` that answers `env get-values --output json` like the real one."""
    script = tmp_path / "azd"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "assert sys.argv[1:] == ['env', 'get-values', '--output', 'json'], sys.argv\n"
        f"print(json.dumps({values!r}))\n"
        f"sys.exit({exit_code})\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _run_hook(
    tmp_path: Path, *args: str, values: dict[str, str] | None = None, code: int = 0
) -> Any:
    azd = _fake_azd(tmp_path, OUTPUTS if values is None else values, code)
    return subprocess.run(
        [sys.executable, str(HOOK), "--azd", str(azd), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_hook_writes_the_settings_the_app_reads_for_the_deployed_resources(
    tmp_path: Path,
) -> None:
    target = tmp_path / "local.settings.json"
    result = _run_hook(tmp_path, "--output", str(target))
    assert result.returncode == 0, result.stderr
    values = json.loads(target.read_text(encoding="utf-8"))["Values"]
    assert values["ServiceBusConnection__fullyQualifiedNamespace"] == "sb-x.servicebus.windows.net"
    assert values["COSMOS_ENDPOINT"] == OUTPUTS["COSMOS_ENDPOINT"]
    assert values["COSMOS_IDEMPOTENCY_CONTAINER"] == "idempotency"
    assert values["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] == "Authorization=AAD"
    assert values["FUNCTIONS_WORKER_RUNTIME"] == "python"
    # The fan-out and the status mode the deployment chose, and the Cosmos DB trigger's account.
    assert values["ORDER_EVENTS_TOPIC"] == "order-events"
    assert values["COSMOS_LEASES_CONTAINER"] == "leases"
    assert (values["BILLING_SUBSCRIPTION"], values["SHIPPING_SUBSCRIPTION"]) == (
        "billing-eu",
        "shipping",
    )
    assert (values["STATUS_QUEUE"], values["STATUS_SESSIONS"]) == ("order-status-sessions", "true")
    assert values["CosmosConnection__accountEndpoint"] == OUTPUTS["COSMOS_ENDPOINT"]
    # Your login, never the function's identity, and never emulator keys.
    for absent in (
        "AZURE_CLIENT_ID",
        "ServiceBusConnection__clientId",
        "ServiceBusConnection__credential",
        "CosmosConnection__clientId",
        "CosmosConnection__credential",
        "COSMOS_KEY",
        "ServiceBusConnection",
    ):
        assert absent not in values, absent
    assert "must-not-leak" not in target.read_text(encoding="utf-8")
    # Every setting it writes is one the app or the host reads.
    from orders.service.registry import app_setting_names

    host = {"AzureWebJobsStorage", "FUNCTIONS_WORKER_RUNTIME", "AzureWebJobs.bill_order.Disabled"}
    assert set(values) <= app_setting_names() | host
    # The names it reads are outputs of main.bicep.
    sys.path.insert(0, str(HOOK.parent))
    try:
        import write_local_settings  # type: ignore[import-not-found]  # a script, not a module
    finally:
        sys.path.remove(str(HOOK.parent))
    outputs = parse(MAIN)["outputs"]
    wanted = {
        *write_local_settings.FROM_OUTPUTS.values(),
        *write_local_settings.OPTIONAL_OUTPUTS.values(),
        write_local_settings.SUBSCRIPTIONS_OUTPUT,
    }
    assert wanted <= set(outputs), wanted - set(outputs)


def test_hook_leaves_the_fanout_names_to_the_codes_defaults_in_an_older_environment(
    tmp_path: Path,
) -> None:
    """An environment provisioned before the fan-out has none of its outputs: still written."""
    fanout = {"COSMOS_INBOX_CONTAINER", "ORDER_EVENTS_TOPIC", "STATUS_QUEUE", "STATUS_SESSIONS"}
    older = {k: v for k, v in OUTPUTS.items() if k not in fanout}
    target = tmp_path / "local.settings.json"
    result = _run_hook(tmp_path, "--output", str(target), values=older)
    assert result.returncode == 0, result.stderr
    values = json.loads(target.read_text(encoding="utf-8"))["Values"]
    assert fanout.isdisjoint(values)
    assert values["COSMOS_LEASES_CONTAINER"] == "leases"


@pytest.mark.parametrize("existing_file", [False, True])
def test_hook_says_billing_is_disabled_when_payments_url_was_empty(
    tmp_path: Path, existing_file: bool
) -> None:
    """The first `azd up` without PAYMENTS_URL deploys bill_order disabled (functionapp.bicep):
    the postprovision hook says so, and what to do, after every provision."""
    target = tmp_path / "local.settings.json"
    if existing_file:
        target.write_text('{"Values": {}}', encoding="utf-8")
    result = _run_hook(
        tmp_path, "--output", str(target), values={**OUTPUTS, "BILLING_ENABLED": "false"}
    )
    assert result.returncode == 0, result.stderr
    assert "billing is DISABLED" in result.stdout
    assert "AzureWebJobs.bill_order.Disabled=true" in result.stdout
    assert "azd env set PAYMENTS_URL" in result.stdout
    if not existing_file:
        values = json.loads(target.read_text(encoding="utf-8"))["Values"]
        assert values["AzureWebJobs.bill_order.Disabled"] == "true"

    billing_on = tmp_path / "on.json"
    enabled = _run_hook(
        tmp_path, "--output", str(billing_on), values={**OUTPUTS, "BILLING_ENABLED": "true"}
    )
    assert enabled.returncode == 0, enabled.stderr
    assert "DISABLED" not in enabled.stdout
    values = json.loads(billing_on.read_text(encoding="utf-8"))["Values"]
    assert "AzureWebJobs.bill_order.Disabled" not in values


def test_hook_keeps_an_existing_file_unless_forced(tmp_path: Path) -> None:
    target = tmp_path / "local.settings.json"
    target.write_text('{"Values": {"COSMOS_KEY": "emulator"}}', encoding="utf-8")
    kept = _run_hook(tmp_path, "--output", str(target))
    assert kept.returncode == 0 and "kept" in kept.stdout
    assert "emulator" in target.read_text(encoding="utf-8")

    forced = _run_hook(tmp_path, "--output", str(target), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "COSMOS_KEY" not in json.loads(target.read_text(encoding="utf-8"))["Values"]


@pytest.mark.parametrize(
    ("values", "code", "message"),
    [
        ({k: v for k, v in OUTPUTS.items() if k != "COSMOS_ENDPOINT"}, 0, "COSMOS_ENDPOINT"),
        (OUTPUTS, 1, "azd env get-values failed"),
    ],
)
def test_hook_fails_loudly_and_writes_nothing(
    tmp_path: Path, values: dict[str, str], code: int, message: str
) -> None:
    target = tmp_path / "local.settings.json"
    result = _run_hook(tmp_path, "--output", str(target), values=values, code=code)
    assert result.returncode == 1
    assert message in result.stderr
    assert not target.exists()


# --- GitHub workflows ---------------------------------------------------------------------------


def _workflow(name: str) -> dict[Any, Any]:
    loaded: dict[Any, Any] = _yaml(WORKFLOWS / name)
    return loaded


def _on(workflow: dict[Any, Any]) -> dict[str, Any]:
    # YAML 1.1 reads the key `on` as True.
    triggers = workflow.get("on", workflow.get(True))
    assert isinstance(triggers, dict)
    return triggers


def test_test_workflow_runs_make_test() -> None:
    workflow = _workflow("test.yml")
    assert {"push", "pull_request", "workflow_call"} <= set(_on(workflow))
    # A push to main runs the suite through azure-dev.yml; running it here too would run it twice.
    assert "main" in _on(workflow)["push"]["branches-ignore"]
    assert "branches" not in _on(workflow)["push"]
    steps = workflow["jobs"]["test"]["steps"]
    runs = [step.get("run", "").strip() for step in steps]
    assert "make test" in runs
    assert "make setup" in runs  # the dev extra, actionlint included
    assert workflow["permissions"] == {"contents": "read"}


def test_deploy_workflow_is_what_azd_pipeline_config_expects() -> None:
    workflow = _workflow("azure-dev.yml")
    assert workflow["permissions"] == {"id-token": "write", "contents": "read"}
    assert workflow["jobs"]["test"]["uses"] == "./.github/workflows/test.yml"
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "test"
    # A push to main runs the suite exactly once: here (test.yml leaves main to this workflow).
    assert _on(workflow)["push"] == {"branches": ["main"]}
    assert deploy["if"] == "vars.AZURE_CLIENT_ID != ''"
    for name in (
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_SUBSCRIPTION_ID",
        "AZURE_ENV_NAME",
        "AZURE_LOCATION",
    ):
        assert deploy["env"][name] == f"${{{{ vars.{name} }}}}", name
    runs = [step.get("run", "") for step in deploy["steps"]]
    login = next(run for run in runs if "azd auth login" in run)
    assert '--federated-credential-provider "github"' in login
    assert "secret" not in login.lower()
    assert [r.strip() for r in runs if r.strip().startswith("azd ") and "login" not in r] == [
        "azd provision --no-prompt",
        "azd deploy --no-prompt",
    ]


def _actionlint() -> str | None:
    beside_python = Path(sys.executable).parent / "actionlint"
    if beside_python.is_file():
        return str(beside_python)
    return shutil.which("actionlint")


def test_workflows_pass_actionlint() -> None:
    binary = _actionlint()
    if binary is None:
        message = "actionlint is not installed (the dev extra brings it on Linux and Windows)"
        # CI (ours and the GitHub workflow) installs the dev extra: there it must be present.
        if os.environ.get("CI") == "true" or os.environ.get("GITHUB_ACTIONS") == "true":
            pytest.fail(message)
        pytest.skip(message)
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) == 2
    result = subprocess.run(
        [binary, "-no-color", "-oneline", *files],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- dev container ------------------------------------------------------------------------------


def test_dev_container_has_the_tools_make_demo_and_azd_need() -> None:
    config = json.loads((REPO_ROOT / ".devcontainer" / "devcontainer.json").read_text("utf-8"))
    assert config["image"].split("/")[-1] == "python:1-3.11-bookworm"
    features = {
        ref.rsplit(":", 1)[0].split("/")[-1]: opts for ref, opts in config["features"].items()
    }
    assert set(features) == {
        "node",
        "azure-cli",
        "azd",
        "azure-functions-core-tools",
        "docker-in-docker",
    }
    assert features["node"]["version"] == "20"
    assert features["azure-functions-core-tools"]["version"] == "4"
    # `make demo` and `make test` then work unchanged: the venv is built on creation.
    assert config["postCreateCommand"] == "make setup"


# --- Dependabot ---------------------------------------------------------------------------------


def test_dependabot_watches_every_lock_and_moves_the_azure_sdks_together() -> None:
    config = _yaml(REPO_ROOT / ".github" / "dependabot.yml")
    assert config["version"] == 2
    updates = {entry["package-ecosystem"]: entry for entry in config["updates"]}
    assert set(updates) == {"pip", "npm", "github-actions", "devcontainers"}
    npm_directories = set(updates["npm"]["directories"])
    assert npm_directories == {"/emulators/cosmos", "/tests/js"}
    for directory in npm_directories:
        assert (REPO_ROOT / directory.lstrip("/") / "package-lock.json").is_file(), directory
    pip = updates["pip"]
    assert pip["directory"] == "/"
    assert (REPO_ROOT / "requirements.txt").is_file()
    assert {"azure-*", "azurefunctions-*"} <= set(pip["groups"]["azure-sdks"]["patterns"])
    # The preview binding is pinned on purpose and moves by hand (infra/README.md).
    ignored = {entry["dependency-name"] for entry in pip.get("ignore", [])}
    assert ignored == {"azurefunctions-extensions-bindings-servicebus"}
