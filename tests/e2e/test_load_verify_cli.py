"""`orders load` and `orders verify` as a user runs them, against the local stack."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_support import orders_cli

from orders.domain.load_plan import plan_from_json
from orders.entrypoints.demo import wait_for_audit
from orders.entrypoints.localstack import LocalStack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_load_then_verify_proves_the_run_and_fails_an_unsent_manifest(
    stack: LocalStack, tmp_path: Path
) -> None:
    manifest = tmp_path / "manifest.json"
    stack.start_worker()

    loaded = orders_cli(
        stack, "load", "--manifest", str(manifest), "--orders", "40",
        "--duplicate-window", str(stack.queue.duplicate_window_seconds), "--seed", "3",
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    plan = plan_from_json(json.loads(manifest.read_text()))
    assert asyncio.run(wait_for_audit(stack, plan, within=90)).ok

    verified = orders_cli(stack, "verify", "--manifest", str(manifest), "--json", "--no-fanout")
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["ok"] is True
    assert report["unique_orders"] == report["orders_in_store"] == 40
    assert report["expected_dead_letters"] == report["dead_lettered"] > 0

    unsent = json.loads(manifest.read_text())
    unsent["run_id"] = "neversent"
    for send in unsent["sends"]:
        send["message_id"] = send["message_id"].replace(plan.run_id, "neversent")
    (tmp_path / "unsent.json").write_text(json.dumps(unsent))
    failed = orders_cli(
        stack, "verify", "--manifest", str(tmp_path / "unsent.json"), "--json", "--no-fanout"
    )
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["missing_orders"] == 40


def test_commands_without_settings_fail_clearly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COSMOS_", "ServiceBus"))}
    result = subprocess.run(
        [sys.executable, "-m", "orders", "verify", "--manifest", str(tmp_path / "m.json")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )

    assert result.returncode == 2
    assert "COSMOS_ENDPOINT is not set" in result.stderr
