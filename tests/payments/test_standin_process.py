"""The stand-in as a process: a durable ledger across SIGKILL, clean stops, and its hosts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from payment_service import SRC, running_standin, start_standin
from standin_http import charge, charges_of, refund, refunds_of


def test_charges_survive_sigkill_and_a_restart_on_the_same_data(tmp_path: Path) -> None:
    first = start_standin(tmp_path)
    try:
        with httpx.Client(base_url=first.url, auth=first.auth()) as client:
            made = charge(client, "billing:o-durable", "o-durable").json()
    finally:
        assert first.signal(signal.SIGKILL) == -signal.SIGKILL

    with (
        running_standin(tmp_path) as second,
        httpx.Client(base_url=second.url, auth=second.auth()) as client,
    ):
        listed = charges_of(client, "o-durable")
        replay = charge(client, "billing:o-durable", "o-durable")
        reused = charge(client, "billing:o-durable", "o-durable", amount="99")

    assert listed == [made]
    assert replay.status_code == 200
    assert replay.json() == made
    assert reused.status_code == 422


def test_refunds_survive_sigkill_and_a_restart_on_the_same_data(tmp_path: Path) -> None:
    first = start_standin(tmp_path)
    try:
        with httpx.Client(base_url=first.url, auth=first.auth()) as client:
            payment_id = charge(client, "billing:o-back", "o-back").json()["paymentId"]
            made = refund(client, "refund:o-back", payment_id).json()
    finally:
        assert first.signal(signal.SIGKILL) == -signal.SIGKILL

    with (
        running_standin(tmp_path) as second,
        httpx.Client(base_url=second.url, auth=second.auth()) as client,
    ):
        listed = refunds_of(client, orderId="o-back")
        replay = refund(client, "refund:o-back", payment_id)
        another = refund(client, "refund-again:o-back", payment_id, "0.01")

    assert listed == [made]
    assert replay.status_code == 200
    assert replay.json() == made
    assert another.status_code == 409


def test_two_processes_sharing_one_data_directory_never_refund_more_than_paid(
    tmp_path: Path,
) -> None:
    with running_standin(tmp_path) as one, running_standin(tmp_path) as two:
        with httpx.Client(base_url=one.url, auth=one.auth()) as client:
            payment_id = charge(client, "billing:o-split", "o-split", "10").json()["paymentId"]
        start = threading.Barrier(20)

        def attempt(n: int) -> httpx.Response:
            with httpx.Client(
                base_url=(one, two)[n % 2].url, timeout=60, auth=(one, two)[n % 2].auth()
            ) as client:
                start.wait(timeout=30)
                return refund(client, f"refund-{n}:o-split", payment_id, "1")

        with ThreadPoolExecutor(max_workers=20) as pool:
            responses = list(pool.map(attempt, range(20)))
        with httpx.Client(base_url=two.url, auth=two.auth()) as client:
            listed = refunds_of(client, paymentId=payment_id)

    assert sorted(r.status_code for r in responses) == [201] * 10 + [409] * 10
    assert len(listed) == 10


def test_allowed_host_flags_add_served_names() -> None:
    with running_standin(None, "--allowed-host", "payments.internal") as standin:
        port = standin.url.rsplit(":", 1)[1]
        named = httpx.get(standin.url + "/health", headers={"Host": f"payments.internal:{port}"})
        other = httpx.get(standin.url + "/health", headers={"Host": f"elsewhere:{port}"})

    assert (named.status_code, other.status_code) == (200, 421)


def test_two_processes_sharing_one_data_directory_charge_a_key_once(tmp_path: Path) -> None:
    key, order_id = "billing:o-shared", "o-shared"
    with running_standin(tmp_path) as one, running_standin(tmp_path) as two:
        start = threading.Barrier(20)

        def attempt(n: int) -> httpx.Response:
            with httpx.Client(
                base_url=(one, two)[n % 2].url, timeout=60, auth=(one, two)[n % 2].auth()
            ) as client:
                start.wait(timeout=30)
                return charge(client, key, order_id)

        with ThreadPoolExecutor(max_workers=20) as pool:
            responses = list(pool.map(attempt, range(20)))
        with httpx.Client(base_url=two.url, auth=two.auth()) as client:
            listed = charges_of(client, order_id)

    assert sorted(r.status_code for r in responses) == [200] * 19 + [201]
    assert {r.json()["paymentId"] for r in responses} == {listed[0]["paymentId"]}
    assert len(listed) == 1


def test_without_data_the_ledger_lives_in_memory_only(tmp_path: Path) -> None:
    with running_standin() as first, httpx.Client(base_url=first.url, auth=first.auth()) as client:
        assert charge(client, "k", "o-memory").status_code == 201
    with (
        running_standin() as second,
        httpx.Client(base_url=second.url, auth=second.auth()) as client,
    ):
        assert charges_of(client, "o-memory") == []
        assert charge(client, "k", "o-memory").status_code == 201
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_stop_it_cleanly(tmp_path: Path, signum: int) -> None:
    standin = start_standin(tmp_path)

    assert standin.signal(signum) == 0
    assert (tmp_path / "payments.sqlite3").is_file()


def test_fault_flags_apply_from_the_start() -> None:
    rule = '{"kind": "refuse", "count": 1}'
    with (
        running_standin(None, "--fault", rule) as standin,
        httpx.Client(base_url=standin.url, auth=standin.auth()) as client,
    ):
        assert [r["kind"] for r in client.get("/faults").json()["faults"]] == ["refuse"]
        assert charge(client, "k", "o-flag").status_code == 503
        assert charge(client, "k", "o-flag").status_code == 201


@pytest.mark.parametrize(
    "args",
    [
        ["--fault", '{"kind": "explode"}'],
        ["--fault", "not json"],
        ["--port", "70000"],
        ["--data", "TMP/a-file"],
        ["--data", "TMP/ledger-dir"],  # where the database file should be, a directory is
        ["--allowed-host", "not a host"],
        ["--allowed-host", "host:70000"],
        ["--fault-token", "short"],
        ["--fault-token", "has space in the middle"],
        ["--token", "short"],
    ],
)
def test_bad_arguments_exit_2_without_serving(args: list[str], tmp_path: Path) -> None:
    args = [arg.replace("TMP", str(tmp_path)) for arg in args]
    (tmp_path / "a-file").write_text("not a directory")
    (tmp_path / "ledger-dir" / "payments.sqlite3").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-m", "payments_standin", "--port", "0", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=30,
    )

    assert result.returncode == 2
    assert "listening" not in result.stdout


def test_orders_payments_runs_the_stand_in_and_forwards_sigterm(tmp_path: Path) -> None:
    token = "t-" + "x" * 30  # the app's PAYMENTS_TOKEN, which the stand-in's money routes ask for
    process = subprocess.Popen(
        [sys.executable, "-m", "orders", "payments", "--port", "0", "--data", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PAYMENTS_TOKEN": token},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        url = line.removeprefix("payments service listening on ")
        assert url.startswith("http://127.0.0.1:"), line
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
            assert charge(client, "k-cli", "o-cli").status_code == 201
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    # The child stopped with it (nothing holds the ledger), and the charge is on disk.
    with (
        running_standin(tmp_path) as again,
        httpx.Client(base_url=again.url, auth=again.auth()) as client,
    ):
        assert [c["idempotencyKey"] for c in charges_of(client, "o-cli")] == ["k-cli"]


def test_orders_payments_exits_with_the_stand_ins_error_when_the_port_is_taken() -> None:
    with running_standin() as holder:
        taken = holder.url.rsplit(":", 1)[1]
        result = subprocess.run(
            [sys.executable, "-m", "orders", "payments", "--port", taken],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert result.returncode == 2
    assert "did not start" in result.stderr
    assert "listening" not in result.stdout
