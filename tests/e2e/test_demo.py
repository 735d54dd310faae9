"""The README's run command: `orders demo` proves the mission and leaves nothing running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from e2e_support import poll_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def processes_tagged(tag: str) -> list[int]:
    """Pids whose environment carries the tag (children inherit it; /proc tells the truth)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"ORDERS_TEST_TAG={tag}".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_demo_prints_an_ok_verify_report_and_leaves_no_process_behind(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    html_report = tmp_path / "report.html"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "orders",
            "demo",
            "--orders",
            "80",
            "--workers",
            "2",
            "--json",
            "--report",
            str(html_report),
        ],
        capture_output=True,
        text=True,
        timeout=200,
        env={**os.environ, "ORDERS_TEST_TAG": tag},
    )

    assert result.returncode == 0, result.stderr[-3000:]
    # Not a terminal: stages only, no progress bar printed after the workers stopped.
    assert "workers stopped" in result.stderr and "sending" not in result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"] is True and report["violations"] == []
    assert report["unique_orders"] == report["orders_in_store"] == 80
    assert report["duplicate_orders"] == report["missing_orders"] == 0
    assert report["dead_lettered"] == report["expected_dead_letters"] > 0
    outcomes = report["consumer_outcomes"]
    assert outcomes["processed"] == 80
    assert outcomes["duplicate"] >= report["sends_by_kind"]["late_duplicate"]
    assert report["worker_exit_codes"] == [0, 0]  # SIGTERM: drained and exited cleanly
    # The saga: cancels at every point, every invariant 0, the answers as the stores say.
    assert report["invariants"] and not any(report["invariants"].values())
    answers = report["cancel_answers"]
    assert set(answers) == {"before_billing", "after_charge", "after_ship", "twice"}
    assert answers["after_ship"] == {"already_shipped": 10}
    # Shipping starts once the cancels meant for before it are answered: they all take effect.
    assert answers["before_billing"] == answers["after_charge"] == {"cancelled": 10}
    assert answers["twice"] == {"cancelled": 20}
    assert report["subscriber_outcomes"]["billing"]["refunded"] >= 10
    page = html_report.read_text(encoding="utf-8")
    assert "orders demo: OK" in page and page.count("<polyline") >= 2
    assert processes_tagged(tag) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_demo_stops_everything_it_started(tmp_path: Path, signum: int) -> None:
    tag = uuid.uuid4().hex
    stderr_path = tmp_path / "demo.err"
    with stderr_path.open("wb") as stderr:
        demo = subprocess.Popen(
            [sys.executable, "-m", "orders", "demo", "--orders", "2000", "--workers", "2"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "ORDERS_TEST_TAG": tag},
        )
    try:
        poll_until(
            lambda: b"workers started" in stderr_path.read_bytes(), 60, "the workers to start"
        )
        assert len(processes_tagged(tag)) >= 5  # the demo, two emulators, two workers

        demo.send_signal(signum)
        demo.wait(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()

    poll_until(lambda: processes_tagged(tag) == [], 30, "every started process to exit")
