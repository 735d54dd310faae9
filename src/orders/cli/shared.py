"""What every command shares: the consoles, logging, settings that fail clearly, and one answer
for a service that cannot be reached."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlsplit

import typer
from rich.console import Console
from rich.markup import escape

from orders.settings import Settings, SettingsError

if TYPE_CHECKING:
    from orders.adapters.preflight import Needed

err = Console(stderr=True)
out = Console()

# Exit status of a command that could not reach what it needs (as for bad configuration).
UNREACHABLE_EXIT = 2
# A connect that takes longer than this is as good as down for an operator's command.
CONNECT_TIMEOUT_SECONDS = 3.0
# A Service Bus endpoint answers AMQP's protocol header at once; one that does not within this
# is something else (an HTTP server waits for a request line that never comes, and the SDK with
# it, retrying for minutes).
PROTOCOL_TIMEOUT_SECONDS = 3.0
AMQP_HEADER = b"AMQP"
AMQP_SASL_HEADER = b"AMQP\x03\x01\x00\x00"  # what the SDK opens with
# The services a command may need, as `endpoints` and the one-line reports name them.
COSMOS_DB = "Cosmos DB"
SERVICE_BUS = "Service Bus"
BOTH_SERVICES = frozenset({COSMOS_DB, SERVICE_BUS})
_UNREACHABLE_ERRNOS = frozenset(
    {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT}
)


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    for noisy in ("azure", "uamqp", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def settings_or_exit(*, needs_servicebus: bool = True) -> Settings:
    try:
        settings = Settings.from_env()
        if needs_servicebus:
            settings.require_servicebus()
        return settings
    except SettingsError as exc:
        err.print(f"[red]configuration error:[/red] {exc}")
        raise typer.Exit(2) from exc


def endpoints(settings: Settings) -> list[tuple[str, str, int]]:
    """(service, host, port) of Cosmos DB and Service Bus as the settings name them."""
    found: list[tuple[str, str, int]] = []
    cosmos = urlsplit(settings.cosmos_endpoint)
    if cosmos.hostname:
        default = 443 if cosmos.scheme == "https" else 80
        found.append((COSMOS_DB, cosmos.hostname, cosmos.port or default))
    connection = settings.servicebus_connection_string or ""
    fields = dict(
        part.split("=", 1) for part in connection.split(";") if "=" in part and part.strip()
    )
    emulator = fields.get("UseDevelopmentEmulator", "").lower() == "true"
    # The emulator string turns TLS off (plain AMQP, 5672); Azure speaks AMQPS on 5671.
    default_port = 5672 if emulator else 5671
    if "Endpoint" in fields:
        endpoint = urlsplit(fields["Endpoint"].strip())
        if endpoint.hostname:
            found.append((SERVICE_BUS, endpoint.hostname, endpoint.port or default_port))
    elif settings.servicebus_namespace:
        found.append((SERVICE_BUS, settings.servicebus_namespace, 5671))
    return found


def unreachable_services(
    settings: Settings, services: frozenset[str] = BOTH_SERVICES
) -> dict[str, str]:
    """Why each of `services` that the settings name cannot be reached (one line each): a
    connect on each, so a stopped stack is reported at once instead of after the SDKs'
    retries. A service the command does not need is not tried: its outage is not this
    command's business."""
    found: dict[str, str] = {}
    for service, host, port in endpoints(settings):
        if service not in services:
            continue
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_SECONDS):
                pass
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            found[service] = f"cannot reach {service} at {host}:{port} ({why})"
    return found


def unreachable(settings: Settings, services: frozenset[str] = BOTH_SERVICES) -> str | None:
    """Why the first of `services` that cannot be reached cannot be (one line), or None."""
    return next(iter(unreachable_services(settings, services).values()), None)


def servicebus_protocol_problem(settings: Settings) -> str | None:
    """Why the Service Bus endpoint the settings name is not an AMQP broker, or None: the
    protocol header sent (over TLS unless it is the emulator's string), an AMQP header back."""
    for service, host, port in endpoints(settings):
        if service != SERVICE_BUS:
            continue
        tls = "usedevelopmentemulator=true" not in (
            settings.servicebus_connection_string or ""
        ).lower().replace(" ", "")
        try:
            with socket.create_connection((host, port), timeout=PROTOCOL_TIMEOUT_SECONDS) as raw:
                raw.settimeout(PROTOCOL_TIMEOUT_SECONDS)
                if tls:
                    context = ssl.create_default_context()
                    with context.wrap_socket(raw, server_hostname=host) as secure:
                        secure.sendall(AMQP_SASL_HEADER)
                        answer = secure.recv(8)
                else:
                    raw.sendall(AMQP_SASL_HEADER)
                    answer = raw.recv(8)
        except (OSError, ssl.SSLError) as exc:
            answer = f"{type(exc).__name__}: {exc}".encode()
        if not answer.startswith(AMQP_HEADER):
            shown = answer[:40].decode("ascii", "replace") or "nothing"
            return (
                f"{SERVICE_BUS} at {host}:{port} does not answer as Service Bus (AMQP): it "
                f"answered {shown!r}; is ServiceBusConnection's Endpoint the namespace?"
            )
    return None


def exit_with(why: str, code: int = UNREACHABLE_EXIT) -> NoReturn:
    """One line on stderr, whatever the terminal's width, and exit `code`."""
    err.print(f"[red]{escape(why)}[/red]", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def require_ready(
    settings: Settings,
    *,
    cosmos: Sequence[Needed] | None = None,
    servicebus: Sequence[Needed] | None = None,
    host: bool = False,
) -> None:
    """Exit with one line unless what a command needs is there: Cosmos DB when `cosmos` is
    given (the database and those containers), Service Bus when `servicebus` is (those
    entities). Reachability first (a connect), then the protocol, then the resources. A
    `host` (worker, dispatcher, API) on an emulator's key creates its database and containers,
    as it would on first use."""
    from orders.adapters.preflight import problem

    needs = frozenset(
        service
        for service, wanted in ((COSMOS_DB, cosmos), (SERVICE_BUS, servicebus))
        if wanted is not None
    )
    require_reachable(settings, needs)
    if SERVICE_BUS in needs and (wrong := servicebus_protocol_problem(settings)) is not None:
        exit_with(wrong)
    create_local = host and settings.uses_emulator_keys
    found = asyncio.run(problem(settings, cosmos, servicebus, create_local=create_local))
    if found is not None:
        exit_with(found)


def exit_unreachable(why: str) -> NoReturn:
    # One line whatever the terminal's width: soft_wrap leaves wrapping to the terminal.
    err.print(
        f"[red]{why}[/red]: is the local stack running? (`orders up`, then "
        '`eval "$(orders env)"` in this shell; in Azure, check the settings)',
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(UNREACHABLE_EXIT)


def require_reachable(settings: Settings, services: frozenset[str] = BOTH_SERVICES) -> None:
    why = unreachable(settings, services)
    if why is not None:
        exit_unreachable(why)


def connection_failure(exc: BaseException) -> BaseException | None:
    """The network error at the root of `exc` (the SDKs wrap it in their own types), or None.

    Walks the cause chain rather than naming SDK exception types: the CLI never imports an
    SDK, and every SDK keeps the socket error it failed on as a cause.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionError | TimeoutError | socket.gaierror):
            return current
        if isinstance(current, OSError) and current.errno in _UNREACHABLE_ERRNOS:
            return current
        inner = getattr(current, "inner_exception", None)
        current = current.__cause__ or current.__context__ or inner
    return None


@contextmanager
def connection_errors_exit() -> Iterator[None]:
    """A lost connection in the middle of a command: one line and exit 2, not a traceback."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise  # already a decided exit, whatever caused it
    except Exception as exc:
        cause = connection_failure(exc)
        if cause is None:
            raise
        exit_unreachable(f"lost the connection ({type(cause).__name__}: {cause})")


def iso_time(epoch_seconds: float) -> str:
    """Epoch seconds as an ISO-8601 UTC time, to the millisecond."""
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat(timespec="milliseconds")
