"""Which exceptions mean "the service is unreachable or busy for now": backed off in place.

`is_transient` knows what every Python client raises when a service is down, slow or
throttling, so an effect lets such errors propagate and its message waits instead of spending
deliveries:

- the standard library's `ConnectionError` (refused, reset, aborted, broken pipe),
  `TimeoutError` (`asyncio.TimeoutError` is the same class), and an `OSError` whose errno is a
  network one (unreachable, down, timed out) or a DNS lookup that failed for now (`EAI_AGAIN`);
- aiohttp: `ClientConnectionError` (its `ServerTimeoutError` too), `ClientPayloadError` (the
  answer broke off), `ClientResponseError` with a retried status;
- httpx: `TransportError` (timeouts, network and remote protocol errors; not
  `UnsupportedProtocol` or `LocalProtocolError`, which are mistakes in the request),
  `HTTPStatusError` with a retried status;
- azure-core (every Azure SDK): `ServiceRequestError` (the request never reached the
  service), `ServiceResponseError` (no answer came), `HttpResponseError` with a retried status;
- azure-servicebus: `ServiceBusConnectionError`, `ServiceBusCommunicationError`,
  `ServiceBusServerBusyError`, `OperationTimeoutError`.

A retried status is 408, 429 or a 5xx other than 501 and 505 (no retry makes a server
implement a method or an HTTP version). A 401 or 403 (a missing role after a deploy) is not
transient: it is an unexpected failure, retried a few times at once and then handed back
(`exactly_once._backoff`), so that no message waits minutes for a setting an operator fixes.

No client library is imported here: a library's exception can only have been raised if its
module is loaded, so each check looks the module up in `sys.modules` and is skipped when it is
not there. An exception group is transient when every exception in it is.

`ConsumerOptions(transient=...)` and on `Effects.two_phase` adds exceptions of your own
(`Transient`: a tuple of types, or a predicate); raising `exactly_once.RetryLater` says the same
from inside an effect.
"""

from __future__ import annotations

import errno
import socket
import sys
from collections.abc import Callable
from typing import Any, TypeAlias

Transient: TypeAlias = tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""What a caller adds to the transient exceptions: exception types, or a predicate."""

# Errnos of a network that is down or a peer that does not answer; others (EACCES, ENOENT, a
# full disk) are not the network's and stay unexpected.
NETWORK_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.EHOSTDOWN,
    }
)
# A lookup the resolver may answer next time (not EAI_NONAME: a name that does not exist).
_TEMPORARY_LOOKUP_FAILURES = frozenset({socket.EAI_AGAIN})


def is_retried_status(status: object) -> bool:
    """Whether an HTTP status says "try again later": 408, 429, or a 5xx but 501 and 505."""
    return isinstance(status, int) and (
        status in (408, 429) or (500 <= status <= 599 and status not in (501, 505))
    )


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` is what a client raises when its service is unreachable or busy (see the
    module's docstring for the list)."""
    if isinstance(exc, BaseExceptionGroup):
        return bool(exc.exceptions) and all(is_transient(inner) for inner in exc.exceptions)
    return (
        _is_standard_transient(exc)
        or _is_aiohttp_transient(exc)
        or _is_httpx_transient(exc)
        or _is_azure_transient(exc)
    )


def transient_check(transient: Transient | None) -> Callable[[BaseException], bool]:
    """The defaults (`is_transient`) joined with what a caller adds (types or a predicate)."""
    if transient is None:
        return is_transient
    if isinstance(transient, tuple):
        types = transient
        return lambda exc: isinstance(exc, types) or is_transient(exc)
    added = transient
    return lambda exc: added(exc) or is_transient(exc)


def _is_standard_transient(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if isinstance(exc, socket.gaierror):
        return exc.errno in _TEMPORARY_LOOKUP_FAILURES
    return isinstance(exc, OSError) and exc.errno in NETWORK_ERRNOS


def _loaded(module: str) -> Any:
    """The module if some code imported it (then its exceptions may exist), else None."""
    return sys.modules.get(module)


def _is_instance(exc: BaseException, module: Any, *names: str) -> bool:
    """Whether `exc` is an instance of any of `module`'s classes `names` (missing ones skipped:
    an older release of the library may not have them)."""
    classes = tuple(
        found for name in names if isinstance(found := getattr(module, name, None), type)
    )
    return bool(classes) and isinstance(exc, classes)


def _is_aiohttp_transient(exc: BaseException) -> bool:
    aiohttp = _loaded("aiohttp")
    if aiohttp is None:
        return False
    if _is_instance(exc, aiohttp, "ClientConnectionError", "ClientPayloadError"):
        return True
    return _is_instance(exc, aiohttp, "ClientResponseError") and is_retried_status(
        getattr(exc, "status", None)
    )


def _is_httpx_transient(exc: BaseException) -> bool:
    httpx = _loaded("httpx")
    if httpx is None:
        return False
    if _is_instance(exc, httpx, "TransportError"):
        return not _is_instance(exc, httpx, "UnsupportedProtocol", "LocalProtocolError")
    if _is_instance(exc, httpx, "HTTPStatusError"):
        response = getattr(exc, "response", None)
        return is_retried_status(getattr(response, "status_code", None))
    return False


def _is_azure_transient(exc: BaseException) -> bool:
    azure_core = _loaded("azure.core.exceptions")
    if azure_core is not None:
        if _is_instance(exc, azure_core, "ServiceRequestError", "ServiceResponseError"):
            return True
        if _is_instance(exc, azure_core, "HttpResponseError") and is_retried_status(
            getattr(exc, "status_code", None)
        ):
            return True
    servicebus = _loaded("azure.servicebus.exceptions")
    return servicebus is not None and _is_instance(
        exc,
        servicebus,
        "ServiceBusConnectionError",
        "ServiceBusCommunicationError",
        "ServiceBusServerBusyError",
        "OperationTimeoutError",
    )
