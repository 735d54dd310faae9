"""The emulator's HTTP port serves only the hosts it is: a DNS-rebinding page is refused (421).

A page on `http://attacker.example:PORT/` that re-binds its name to 127.0.0.1 reaches the port
with its own name in `Host` and a matching `Origin`; the well-known key is public, so signing is
no defence. Every such request gets 421 with a Cosmos error body and changes nothing; the SDK
works with `localhost` and `127.0.0.1` endpoints, and `allowed_hosts` adds names.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from email.utils import formatdate
from pathlib import Path

import pytest
from azure.cosmos import CosmosClient, PartitionKey
from raw_http import exchange, one_response

from cosmos_emulator import WELL_KNOWN_KEY, RunningCosmosEmulator, start_in_background
from cosmos_emulator.auth import authorization_header

SRC = Path(__file__).resolve().parents[2] / "src"
ATTACKER = "attacker.example"


def _request(
    port: int, method: str, path: str, host: str | None, body: bytes = b"", signed: bool = False
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"} if host else {}
    if host is not None:
        headers["Host"] = host
    if signed:
        date = formatdate(usegmt=True)
        headers["x-ms-date"] = date
        headers["authorization"] = authorization_header(WELL_KNOWN_KEY, method, "dbs", "", date)
    headers["Content-Length"] = str(len(body))
    headers["Connection"] = "close"
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    response = one_response(exchange(port, head.encode() + b"\r\n" + body))
    return response.status, response.headers, response.body


def test_a_rebinding_request_is_421_and_changes_nothing(
    fresh_emulator: RunningCosmosEmulator,
) -> None:
    port = fresh_emulator.port
    foreign = f"{ATTACKER}:{port}"
    fault = json.dumps({"status": 503, "count": 1000}).encode()
    status, headers, body = _request(port, "POST", "/_emulator/faults", foreign, fault)
    assert status == 421
    assert headers["content-type"] == "application/json"
    error = json.loads(body)
    assert error["code"] == "MisdirectedRequest"
    assert ATTACKER in error["message"] and f"127.0.0.1:{port}" in error["message"]
    assert fresh_emulator.pending_faults() == []
    created = json.dumps({"id": "planted"}).encode()
    status, _, _ = _request(port, "POST", "/dbs", foreign, created, signed=True)
    assert status == 421
    assert fresh_emulator.stats()["databases"] == 0
    # The same signed request naming a served host goes through: the refusal was the Host.
    status, _, _ = _request(port, "POST", "/dbs", f"127.0.0.1:{port}", created, signed=True)
    assert status == 201
    assert fresh_emulator.stats()["databases"] == 1


@pytest.mark.parametrize(
    "host",
    [
        f"{ATTACKER}",
        "localhost:1",  # a served name on another port
        "127.0.0.2",
        "localhost.:{port}",
        "127.0.0.1:{port}@attacker.example",
        "[::1",
        "",
    ],
)
def test_foreign_or_malformed_hosts_are_refused(
    cosmos_emulator: RunningCosmosEmulator, host: str
) -> None:
    port = cosmos_emulator.port
    status, _, _ = _request(port, "GET", "/_emulator/health", host.format(port=port))
    assert status == 421


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "LocalHost", "127.0.0.1"])
def test_served_hosts_and_a_missing_host_are_answered(
    cosmos_emulator: RunningCosmosEmulator, host: str
) -> None:
    port = cosmos_emulator.port
    assert _request(port, "GET", "/_emulator/health", host.format(port=port))[0] == 200
    assert _request(port, "GET", "/_emulator/health", None)[0] == 200


def test_an_absolute_form_target_naming_another_host_is_refused(
    cosmos_emulator: RunningCosmosEmulator,
) -> None:
    port = cosmos_emulator.port
    target = f"http://{ATTACKER}:{port}/_emulator/health"
    assert _request(port, "GET", target, f"127.0.0.1:{port}")[0] == 421
    served = f"http://localhost:{port}/_emulator/health"
    assert _request(port, "GET", served, f"127.0.0.1:{port}")[0] == 200


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1"])
def test_the_sdk_works_with_either_loopback_name(
    cosmos_emulator: RunningCosmosEmulator, name: str
) -> None:
    endpoint = f"http://{name}:{cosmos_emulator.port}/"
    client = CosmosClient(endpoint, cosmos_emulator.key)
    # The account metadata advertises the endpoint the client used, so its follow-up
    # requests (routed to the advertised location) carry a served Host as well.
    account = client.get_database_account()
    assert [loc["databaseAccountEndpoint"] for loc in account.WritableLocations] == [endpoint]
    db = client.create_database(f"hosts-{name}")
    try:
        container = db.create_container("c", PartitionKey("/pk"))
        container.create_item({"id": "1", "pk": "a"})
        assert container.read_item("1", "a")["id"] == "1"
        assert [d["id"] for d in container.query_items_change_feed(start_time="Beginning")] == ["1"]
    finally:
        client.delete_database(db)


def test_allowed_hosts_add_a_name_with_or_without_a_port() -> None:
    with start_in_background(allowed_hosts=["cosmos:18081", "emulator.internal"]) as emu:
        port = emu.port
        assert _request(port, "GET", "/_emulator/health", "cosmos:18081")[0] == 200
        assert _request(port, "GET", "/_emulator/health", f"cosmos:{port}")[0] == 421
        assert _request(port, "GET", "/_emulator/health", "emulator.internal:1234")[0] == 200
        assert _request(port, "GET", "/_emulator/health", f"{ATTACKER}:{port}")[0] == 421
        # The defaults stay.
        assert _request(port, "GET", "/_emulator/health", f"localhost:{port}")[0] == 200


def test_a_wildcard_bind_serves_the_loopback_names_only() -> None:
    with start_in_background("0.0.0.0", 0) as emu:
        port = emu.port
        assert _request(port, "GET", "/_emulator/health", f"127.0.0.1:{port}")[0] == 200
        assert _request(port, "GET", "/_emulator/health", f"0.0.0.0:{port}")[0] == 421


def test_the_cli_takes_allowed_hosts_and_refuses_a_malformed_one() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-m", "cosmos_emulator", "--port", "0"]
    result = subprocess.run(
        [*command, "--allowed-host", "cosmos:notaport"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert result.returncode == 2
    assert "malformed port" in result.stderr
    proc = subprocess.Popen(
        [*command, "--allowed-host", "cosmos:18081"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip().removeprefix("cosmos-emulator listening on ")
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        assert _request(port, "GET", "/_emulator/health", "cosmos:18081")[0] == 200
        assert _request(port, "GET", "/_emulator/health", f"{ATTACKER}:{port}")[0] == 421
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        assert proc.stdout is not None
        proc.stdout.close()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_an_ipv6_loopback_bind_serves_its_bracketed_address() -> None:
    with start_in_background("::1", 0) as emu:
        port = emu.port
        for host, status in [(f"[::1]:{port}", 200), (f"[::2]:{port}", 421)]:
            conn = http.client.HTTPConnection("::1", port, timeout=5)
            try:
                conn.request("GET", "/_emulator/health", headers={"Host": host})
                assert conn.getresponse().status == status, host
            finally:
                conn.close()
