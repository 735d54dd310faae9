"""The classifier of transient failures (`exactly_once._transient`) and the one error frame that
uses it (`decision_for_error`): what each client library raises when its service is unreachable
or busy is `transient_failure` (backed off in place); a 401/403, a 404 or a bug is
`unexpected_failure`; `transient=` and `RetryLater` add the caller's own.

The unreachable cases are raised for real, by each client against a port nothing listens on;
the status cases are built as each library builds them from an answer."""

from __future__ import annotations

import errno
import logging
import socket
import subprocess
import sys
import textwrap

import aiohttp
import httpx
import pytest
import yarl
from azure.core import PipelineClient
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.rest import HttpRequest
from azure.cosmos.exceptions import CosmosHttpResponseError
from azure.servicebus.exceptions import (
    MessageLockLostError,
    ServiceBusAuthorizationError,
    ServiceBusConnectionError,
    ServiceBusServerBusyError,
)
from multidict import CIMultiDict, CIMultiDictProxy

from exactly_once import Outcome, RetryLater, TransientStoreError
from exactly_once._attempts import one_delivery
from exactly_once._transient import is_retried_status, transient_check
from exactly_once.decisions import decision_for_error
from exactly_once.retries import is_transient


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def aiohttp_status(status: int) -> aiohttp.ClientResponseError:
    url = yarl.URL("http://127.0.0.1/pay")
    info = aiohttp.RequestInfo(url, "POST", CIMultiDictProxy(CIMultiDict()), url)
    return aiohttp.ClientResponseError(info, (), status=status, message="answered")


def azure_status(status: int) -> HttpResponseError:
    """An Azure SDK's answer with `status` (the Cosmos SDK's subclass of azure-core's)."""
    return CosmosHttpResponseError(status_code=status, message="answered")  # type: ignore[no-untyped-call]


def httpx_status(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/pay")
    response = httpx.Response(status, request=request)
    return httpx.HTTPStatusError(f"answered {status}", request=request, response=response)


async def aiohttp_unreachable() -> BaseException:
    async with aiohttp.ClientSession() as session:
        try:
            await session.get(f"http://127.0.0.1:{closed_port()}/")
        except aiohttp.ClientError as exc:
            return exc
    raise AssertionError("a closed port answered")


async def httpx_unreachable() -> BaseException:
    async with httpx.AsyncClient() as client:
        try:
            await client.get(f"http://127.0.0.1:{closed_port()}/")
        except httpx.HTTPError as exc:
            return exc
    raise AssertionError("a closed port answered")


def azure_unreachable() -> BaseException:
    address = f"http://127.0.0.1:{closed_port()}"
    client: PipelineClient[HttpRequest, object] = PipelineClient(address)
    try:
        client.send_request(HttpRequest("GET", f"{address}/"))
    except ServiceRequestError as exc:
        return exc
    raise AssertionError("a closed port answered")


async def test_what_each_client_raises_for_an_unreachable_service_is_transient() -> None:
    unreachable = [
        await aiohttp_unreachable(),
        await httpx_unreachable(),
        azure_unreachable(),
        ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
        ConnectionResetError(errno.ECONNRESET, "reset by peer"),
        TimeoutError("timed out"),
        OSError(errno.EHOSTUNREACH, "no route to host"),
        OSError(errno.ENETUNREACH, "network is unreachable"),
        socket.gaierror(socket.EAI_AGAIN, "temporary failure in name resolution"),
        aiohttp.ServerTimeoutError("read timed out"),
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientPayloadError("the answer broke off"),
        httpx.ReadTimeout("read timed out"),
        httpx.RemoteProtocolError("peer closed the connection"),
        ServiceResponseError("no answer"),
        ServiceBusConnectionError(message="link detached"),
        ServiceBusServerBusyError(message="server busy"),
    ]

    assert [type(exc).__name__ for exc in unreachable if not is_transient(exc)] == []


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
def test_a_busy_or_failing_answer_is_transient_in_every_library(status: int) -> None:
    answers = [
        aiohttp_status(status),
        httpx_status(status),
        azure_status(status),
    ]

    assert is_retried_status(status)
    assert all(is_transient(answer) for answer in answers)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 412, 422, 501, 505])
def test_a_refusal_a_missing_role_or_a_wrong_address_is_not_transient(status: int) -> None:
    answers = [
        aiohttp_status(status),
        httpx_status(status),
        azure_status(status),
    ]

    assert not any(is_transient(answer) for answer in answers)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("a bug"),
        KeyError("amount"),
        PermissionError(errno.EACCES, "permission denied"),
        FileNotFoundError(errno.ENOENT, "no such file"),
        socket.gaierror(socket.EAI_NONAME, "name or service not known"),
        httpx.UnsupportedProtocol("Request URL is missing an 'http://' or 'https://' protocol."),
        httpx.LocalProtocolError("illegal header"),
        ClientAuthenticationError("the credential was refused"),
        HttpResponseError("no status"),
        ServiceBusAuthorizationError(message="Unauthorized access. 'Send' claim(s) required"),
        MessageLockLostError(message="lock lost"),
        ExceptionGroup("mixed", [ConnectionError("down"), ValueError("a bug")]),
    ],
    ids=lambda error: type(error).__name__,
)
def test_what_no_wait_fixes_is_not_transient(error: BaseException) -> None:
    assert not is_transient(error)


def test_a_group_of_transient_failures_is_transient() -> None:
    assert is_transient(ExceptionGroup("all down", [ConnectionError("a"), TimeoutError("b")]))


class PaymentUnavailable(Exception):
    """An application's own "try later"."""


def test_transient_adds_types_or_a_predicate_to_the_defaults() -> None:
    by_type = transient_check((PaymentUnavailable,))
    by_predicate = transient_check(lambda exc: "busy" in str(exc))

    assert by_type(PaymentUnavailable()) and by_type(ConnectionError())
    assert not by_type(ValueError("busy"))
    assert by_predicate(ValueError("the provider is busy")) and by_predicate(TimeoutError())
    assert not by_predicate(ValueError("a bug"))


@pytest.mark.parametrize(
    "error",
    [
        RetryLater("the provider said: later"),
        TransientStoreError("Cosmos DB answered 503"),
        ConnectionError("the provider is unreachable"),
        httpx_status(503),
        PaymentUnavailable("the provider is down"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_the_error_frame_backs_transient_failures_off(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="exactly_once"):
        decision = decision_for_error(
            error, consumer="c", message_id="m", transient=(PaymentUnavailable,)
        )

    assert (decision.outcome, decision.settlement) == (Outcome.TRANSIENT_FAILURE, "abandon")
    assert not caplog.records  # a wait is no error: no traceback


def test_an_unexpected_failure_is_logged_with_its_traceback_once_per_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forbidden = azure_status(403)
    with caplog.at_level(logging.INFO, logger="exactly_once"), one_delivery() as attempts:
        decisions = []
        for attempt in (1, 2, 3):
            attempts.attempt = attempt
            decisions.append(
                decision_for_error(
                    forbidden, consumer="stock", message_id="m-1", key="orders/e-1 42"
                )
            )

    assert {decision.outcome for decision in decisions} == {Outcome.UNEXPECTED_FAILURE}
    first, *again = caplog.records
    assert first.levelno == logging.ERROR and first.exc_info is not None
    assert first.getMessage() == (
        'unexpected failure: consumer=stock key="orders/e-1 42" message_id=m-1'
    )
    assert [record.exc_info for record in again] == [None, None]
    assert [record.levelno for record in again] == [logging.INFO, logging.INFO]
    assert "attempt 3" in again[-1].getMessage()


def test_the_classifier_imports_no_client_library() -> None:
    # With the libraries made unimportable, the defaults still answer for the standard ones.
    script = textwrap.dedent(
        """
        import sys
        for name in ("aiohttp", "httpx", "azure.core", "azure.core.exceptions"):
            sys.modules[name] = None
        from exactly_once._transient import is_transient
        assert is_transient(ConnectionResetError()) and is_transient(TimeoutError())
        assert not is_transient(ValueError())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from exactly_once._transient import is_transient; "
            "is_transient(ConnectionError()); "
            "print(sorted(m for m in ('aiohttp', 'httpx', 'azure.core') if m in sys.modules))",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.stdout.strip() == "[]"
