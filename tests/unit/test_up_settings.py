"""What `orders up` writes for the other tools: the fault switches' token goes to env.json
(`orders env` exports it for an operator), owner-readable only, and never to the app's
`local.settings.json`."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from orders.entrypoints.localstack import LocalStack
from orders.entrypoints.up import ENV_FILE, LOCAL_SETTINGS_FILE, export_lines, write_settings

ENVIRONMENT = {"COSMOS_ENDPOINT": "http://127.0.0.1:1/", "COSMOS_KEY": "k"}


def test_the_fault_tokens_go_to_env_json_only_and_it_is_the_owners_alone(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path, payments_url="http://127.0.0.1:2")
    (tmp_path / ENV_FILE).write_text("{}")  # an older run's file, with the default mode
    (tmp_path / ENV_FILE).chmod(0o644)

    write_settings(tmp_path, ENVIRONMENT, "http://127.0.0.1:3", stack.fault_environment())

    recorded = json.loads((tmp_path / ENV_FILE).read_text())
    assert recorded["COSMOS_EMULATOR_FAULT_TOKEN"] == stack.fault_token
    assert recorded["PAYMENTS_STANDIN_FAULT_TOKEN"] == stack.fault_token
    assert f"export COSMOS_EMULATOR_FAULT_TOKEN={stack.fault_token}" in export_lines(tmp_path)
    assert stat.S_IMODE((tmp_path / ENV_FILE).stat().st_mode) == 0o600
    assert stack.fault_token not in (tmp_path / LOCAL_SETTINGS_FILE).read_text()
    assert "FAULT_TOKEN" not in json.dumps(stack.environment())


def test_every_stack_draws_its_own_token() -> None:
    first, second = LocalStack(Path("a")), LocalStack(Path("b"))

    assert first.fault_token != second.fault_token
    assert len(first.fault_token) >= 32
    assert list(first.fault_environment()) == ["COSMOS_EMULATOR_FAULT_TOKEN"]  # no stand-in yet
