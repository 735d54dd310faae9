"""The README's run command: `orders demo` proves the mission and leaves nothing running."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2e_support import poll_until
from servers import TAG_VARIABLE, processes_tagged, reaped_processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_demo_prints_an_ok_verify_report_and_leaves_no_process_behind(tmp_path: Path) -> None:
    html_report = tmp_path / "report.html"
    with reaped_processes() as env:
        result = run_demo(html_report, env)
        left_behind = processes_tagged(env[TAG_VARIABLE])

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
    assert left_behind == []


def run_demo(html_report: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orders", "demo", "--orders", "80", "--workers", "2", "--json",
         "--report", str(html_report)],
        capture_output=True, text=True, timeout=200, env=env,
    )  # fmt: skip


@contextmanager
def inherited_sigint(disposition: signal.Handlers | None) -> Iterator[None]:
    """Children started in the block inherit SIGINT `disposition` (None: as the suite has it).
    A background job of a shell script (`make test &`) starts with SIGINT ignored."""
    if disposition is None:
        yield
        return
    previous = signal.signal(signal.SIGINT, disposition)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    ("signum", "inherited"),
    [
        (signal.SIGINT, None),
        (signal.SIGTERM, None),
        # As when `make test` runs as a background job: the demo inherits SIGINT ignored.
        (signal.SIGINT, signal.SIG_IGN),
    ],
    ids=["SIGINT", "SIGTERM", "SIGINT-inherited-ignored"],
)
def test_interrupted_demo_stops_everything_it_started(
    tmp_path: Path, signum: int, inherited: signal.Handlers | None
) -> None:
    stderr_path = tmp_path / "demo.err"
    with reaped_processes() as env:
        tag = env[TAG_VARIABLE]
        with stderr_path.open("wb") as stderr, inherited_sigint(inherited):
            demo = subprocess.Popen(
                [sys.executable, "-m", "orders", "demo", "--orders", "2000", "--workers", "2"],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
            )
        poll_until(
            lambda: b"workers started" in stderr_path.read_bytes(), 60, "the workers to start"
        )
        assert len(processes_tagged(tag)) >= 5  # the demo, two emulators, two workers

        demo.send_signal(signum)
        demo.wait(timeout=60)
        poll_until(lambda: processes_tagged(tag) == [], 30, "every started process to exit")


def test_a_failed_test_leaves_no_process_behind_whatever_it_ignores(tmp_path: Path) -> None:
    """The reaper itself: a child that ignores SIGINT and SIGTERM and starts a grandchild in a
    session of its own (as the demo's emulators are) is gone once the block ends in failure."""
    script = (
        "import signal, subprocess, sys, time\n"
        "for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " start_new_session=True)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(RuntimeError), reaped_processes() as env:
        tag = env[TAG_VARIABLE]
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        poll_until(lambda: len(processes_tagged(tag)) == 2, 30, "the grandchild to start")
        raise RuntimeError("the test failed here")

    assert processes_tagged(tag) == []
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert child.stdout is not None
    child.stdout.close()
