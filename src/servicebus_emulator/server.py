"""Start and stop the emulator: on the caller's event loop or in a background thread."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from .broker import Broker
from .config import load_namespace
from .connection import DEFAULT_MAX_CONNECTIONS, AmqpConnection

_LOG = logging.getLogger("servicebus_emulator")

SAS_KEY_NAME = "RootManageSharedAccessKey"
SAS_KEY_VALUE = "SAS_KEY_VALUE"


def connection_string(host: str, port: int) -> str:
    """The emulator connection string the SDK expects (`UseDevelopmentEmulator=true`: no TLS)."""
    endpoint = f"[{host}]" if ":" in host else host  # an IPv6 literal needs brackets in a URL
    return (
        f"Endpoint=sb://{endpoint}:{port};SharedAccessKeyName={SAS_KEY_NAME};"
        f"SharedAccessKey={SAS_KEY_VALUE};UseDevelopmentEmulator=true;"
    )


class EmulatorServer:
    """The listening socket, the broker and the open connections, on one event loop."""

    def __init__(
        self, broker: Broker, server: asyncio.Server, connections: set[AmqpConnection]
    ) -> None:
        self.broker = broker
        self._server = server
        self._connections = connections
        sockname = server.sockets[0].getsockname()
        self.host: str = sockname[0]
        self.port: int = sockname[1]

    @classmethod
    async def start(
        cls,
        config_path: str | Path | None = None,
        *,
        config: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | Path | None = None,
        fsync: bool = False,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> EmulatorServer:
        """Listen; with `data_dir`, state is journaled there and restored from it (raises
        `JournalError` when the journal cannot be used). `fsync` syncs each journal write to
        the disk, not only to the operating system. A connection opened while
        `max_connections` are open is refused at its AMQP open."""
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        namespace = load_namespace(config_path, config)
        loop = asyncio.get_running_loop()
        broker = Broker(namespace.queues, loop, namespace.topics)
        connections: set[AmqpConnection] = set()
        try:
            if data_dir is not None:
                broker.open_journal(Path(data_dir), fsync=fsync)
            server = await loop.create_server(
                lambda: AmqpConnection(broker, connections, max_connections),
                host,
                port,
                reuse_address=True,
            )
        except BaseException:  # restored timers must not stay armed on the caller's loop
            broker.close()
            raise
        return cls(broker, server, connections)

    async def close(self) -> None:
        self._server.close()
        for conn in list(self._connections):
            conn.close_with_error("amqp:connection:forced", "The emulator is shutting down.")
        await self._server.wait_closed()
        self.broker.close()


class RunningEmulator:
    """An emulator serving from a daemon thread; `stop()` (or leaving `with`) shuts it down."""

    def __init__(self, start: Callable[[], Awaitable[EmulatorServer]]) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._server: EmulatorServer | None = None
        self._stop_event: asyncio.Event | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(start,),
            name="servicebus-emulator",
            daemon=True,
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        assert self._server is not None
        self.host: str = self._server.host
        self.port: int = self._server.port
        self.connection_string: str = connection_string(self.host, self.port)

    @property
    def broker(self) -> Broker:
        """For tests that inspect queue state; touch it only through `call`."""
        assert self._server is not None
        return self._server.broker

    def call(self, fn: Any, *args: Any) -> Any:
        """Run `fn(*args)` on the emulator's loop and return its result (thread-safe)."""

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def _run(self, start: Callable[[], Awaitable[EmulatorServer]]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main(start))
        except BaseException as exc:
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()
            else:
                _LOG.exception("emulator loop failed")
        finally:
            self._loop.close()
            self._stopped.set()

    async def _main(self, start: Callable[[], Awaitable[EmulatorServer]]) -> None:
        self._stop_event = asyncio.Event()
        self._server = await start()
        self._ready.set()
        await self._stop_event.wait()
        await self._server.close()

    def stop(self) -> None:
        if self._stopped.is_set() or self._stop_event is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._stop_event.set)
        except RuntimeError:  # loop already closed
            return
        self._thread.join(timeout=10)

    def __enter__(self) -> RunningEmulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_in_background(
    config_path: str | Path | None = None,
    *,
    config: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    data_dir: str | Path | None = None,
    fsync: bool = False,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> RunningEmulator:
    """Start the emulator on a daemon thread; returns once it accepts connections. With
    `data_dir` its state is journaled there and restored from there (see journal.py)."""
    return RunningEmulator(
        functools.partial(
            EmulatorServer.start,
            config_path,
            config=config,
            host=host,
            port=port,
            data_dir=data_dir,
            fsync=fsync,
            max_connections=max_connections,
        )
    )
