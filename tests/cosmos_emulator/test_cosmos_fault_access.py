"""Issue 37, item 4: any web page open in the developer's browser could switch the Cosmos
emulator's faults on with a simple cross-site POST (`text/plain`, its own Origin, no custom
header), and every request of the app would then fail. The fault switches now need the token,
a JSON body and no foreign Origin; each refusal changes nothing. `inject_fault()` needs none.
The browser itself tries in tests/browser/test_fault_switches_in_browser.py."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from servers import stop_process, wait_for_output

from cosmos_emulator import RunningCosmosEmulator

SRC = Path(__file__).resolve().parents[2] / "src"
READY_PREFIX = "cosmos-emulator listening on "
DRAWN_TOKEN = re.compile(
    r"cosmos-emulator listening on (?P<url>\S+)\ncosmos-emulator fault token: (?P<token>\S+)"
)
RULE = '{"status": 503, "count": 1000}'
AS_JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Emulator:
    url: str
    fault_token: str

    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.fault_token}"}

    def installed(self) -> list[dict[str, object]]:
        answer = httpx.get(self.url + "_emulator/faults", headers=self.bearer())
        assert answer.status_code == 200
        faults: list[dict[str, object]] = answer.json()["faults"]
        return faults


def run_emulator(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`python -m cosmos_emulator` on a free port; (the process, its URL); stopped by its pid."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cosmos_emulator", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**env, "PYTHONPATH": str(SRC)},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith(READY_PREFIX), line
        yield process, line.removeprefix(READY_PREFIX)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    """Started as `orders up` starts it: the fault token in its environment."""
    token = secrets.token_urlsafe(32)
    for _, url in run_emulator({**os.environ, "COSMOS_EMULATOR_FAULT_TOKEN": token}):
        yield Emulator(url, token)


@pytest.fixture
def faults_url(emulator: Emulator) -> Iterator[str]:
    yield emulator.url + "_emulator/faults"
    httpx.delete(emulator.url + "_emulator/faults", headers=emulator.bearer())


@pytest.mark.parametrize(
    "origin", ["http://attacker.example", "https://attacker.example:8443", "null"]
)
def test_a_cross_site_simple_post_is_403_and_installs_nothing(
    emulator: Emulator, faults_url: str, origin: str
) -> None:
    answer = httpx.post(
        faults_url, content=RULE, headers={"Content-Type": "text/plain", "Origin": origin}
    )

    assert answer.status_code == 403
    assert answer.json()["code"] == "Forbidden"
    assert emulator.installed() == []
    assert httpx.get(emulator.url + "_emulator/health").status_code == 200


def test_a_foreign_origin_is_refused_even_with_the_token(
    emulator: Emulator, faults_url: str
) -> None:
    port = emulator.url.rstrip("/").rsplit(":", 1)[1]
    foreign = ["http://attacker.example", f"https://127.0.0.1:{port}", f"http://localhost:{port}0"]

    answers = [
        httpx.post(faults_url, content=RULE, headers={**AS_JSON, **emulator.bearer(), "Origin": o})
        for o in foreign
    ]

    assert [a.status_code for a in answers] == [403, 403, 403]
    assert emulator.installed() == []


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer wrong-token-of-enough-length", "Basic dXNlcjpwYXNz", "TOKEN"],
)
def test_no_token_or_a_wrong_one_is_401_and_installs_nothing(
    emulator: Emulator, faults_url: str, authorization: str | None
) -> None:
    headers = dict(AS_JSON)
    if authorization is not None:
        headers["Authorization"] = authorization.replace("TOKEN", emulator.fault_token)

    answer = httpx.post(faults_url, content=RULE, headers=headers)

    assert answer.status_code == 401
    assert answer.json()["code"] == "Unauthorized"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert emulator.installed() == []


@pytest.mark.parametrize("content_type", [None, "text/plain", "multipart/form-data; boundary=x"])
def test_a_rule_not_sent_as_json_is_415_even_with_the_token(
    emulator: Emulator, faults_url: str, content_type: str | None
) -> None:
    headers = emulator.bearer()
    if content_type is not None:
        headers["Content-Type"] = content_type

    answer = httpx.post(faults_url, content=RULE, headers=headers)

    assert answer.status_code == 415
    assert answer.json()["code"] == "UnsupportedMediaType"
    assert emulator.installed() == []


def test_a_preflight_is_never_granted(emulator: Emulator, faults_url: str) -> None:
    answer = httpx.request(
        "OPTIONS",
        faults_url,
        headers={
            "Origin": "http://attacker.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )

    assert not [name for name in answer.headers if name.lower().startswith("access-control-")]
    assert emulator.installed() == []


def test_listing_and_clearing_need_the_token_too(emulator: Emulator, faults_url: str) -> None:
    httpx.post(faults_url, content=RULE, headers={**AS_JSON, **emulator.bearer()})

    listed = httpx.get(faults_url)
    cleared = httpx.delete(
        faults_url, headers={**emulator.bearer(), "Origin": "http://attacker.example"}
    )

    assert (listed.status_code, cleared.status_code) == (401, 403)
    assert [rule["status"] for rule in emulator.installed()] == [503]


def test_the_token_a_same_origin_caller_and_json_install_the_rule(
    emulator: Emulator, faults_url: str
) -> None:
    answer = httpx.post(
        faults_url,
        content=RULE,
        headers={
            **emulator.bearer(),
            "Content-Type": "application/json; charset=utf-8",
            "Origin": emulator.url.rstrip("/"),
        },
    )

    assert answer.status_code == 201
    assert [rule["status"] for rule in emulator.installed()] == [503]


def test_without_a_token_given_it_draws_one_and_prints_it_after_the_ready_line(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COSMOS_EMULATOR_FAULT_TOKEN"}
    output = tmp_path / "emulator.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "cosmos_emulator", "--host", "127.0.0.1", "--port", "0"],
            stdout=sink,
            env={**env, "PYTHONPATH": str(SRC)},
        )
    try:
        printed = wait_for_output(output, DRAWN_TOKEN, process)
        emulator = Emulator(printed["url"], printed["token"])
        faults_url = emulator.url + "_emulator/faults"
        assert httpx.post(faults_url, content=RULE, headers=AS_JSON).status_code == 401
        assert (
            httpx.post(faults_url, content=RULE, headers={**AS_JSON, **emulator.bearer()})
        ).status_code == 201
        assert len(emulator.installed()) == 1
    finally:
        stop_process(process)


def test_a_bad_token_stops_the_start_with_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cosmos_emulator", "--port", "0", "--fault-token", "short"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=30,
    )

    assert result.returncode == 2
    assert "fault token" in result.stderr and "listening" not in result.stdout


def test_in_process_the_token_is_the_handles_and_inject_fault_needs_none(
    fresh_emulator: RunningCosmosEmulator,
) -> None:
    fresh_emulator.inject_fault(status=503, count=2)
    faults_url = fresh_emulator.url + "_emulator/faults"

    without = httpx.get(faults_url)
    with_token = httpx.get(
        faults_url, headers={"Authorization": f"Bearer {fresh_emulator.fault_token}"}
    )

    assert without.status_code == 401
    assert [rule["remaining"] for rule in with_token.json()["faults"]] == [2]
