"""What every command shares: the consoles, logging, settings that fail clearly, and one answer
for a service that cannot be reached."""

from __future__ import annotations

import errno
import logging
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import NoReturn
from urllib.parse import urlsplit

import typer
from rich.console import Console

from orders.settings import Settings, SettingsError

err = Console(stderr=True)
out = Console()

# Exit status of a command that could not reach what it needs (as for bad configuration).
UNREACHABLE_EXIT = 2
# A connect that takes longer than this is as good as down for an operator's command.
CONNECT_TIMEOUT_SECONDS = 3.0
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
