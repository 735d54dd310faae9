"""Run the emulator: in a background thread (tests, demo) or in the foreground (CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from .auth import WELL_KNOWN_KEY
from .faults import FaultInjector, FaultRule
from .gateway import Gateway
from .http11 import HttpServer
from .http_limits import HttpLimits
from .store import Store

PURGE_INTERVAL_S = 0.5
FLUSH_INTERVAL_S = 1.0


class EmulatorCore:
    """Everything that runs on the emulator's event loop."""

    def __init__(
        self,
        host: str,
        port: int,
        https: bool,
        data_file: str | None,
        key: str,
        log_requests: bool = False,
        limits: HttpLimits | None = None,
    ) -> None:
        self.host = host
        self.limits = limits or HttpLimits()
        self.requested_port = port
        self.https = https
        self.data_file = Path(data_file) if data_file else None
        self.key = key
        self.store = Store()
        self.faults = FaultInjector()
        self.gateway = Gateway(self.store, key, self.faults, "https" if https else "http")
        self.gateway.log_requests = log_requests
        self.port = 0
        self._http: HttpServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._flushed_changes = 0
        self._write_lock = threading.Lock()

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.https else 'http'}://{host}:{self.port}/"

    async def start(self) -> None:
        if self.data_file is not None and self.data_file.exists():
            try:
                self.store.restore(json.loads(self.data_file.read_text()))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"{self.data_file} is not a cosmos-emulator state file: {exc}"
                ) from exc
            self._flushed_changes = self.store.changes
        ssl_context = None
        if self.https:
            from .tls import self_signed_context

            ssl_context = self_signed_context(self.host)
        self._http = HttpServer(self.gateway.handle, ssl_context, self.limits)
        self.port = await self._http.start(self.host, self.requested_port)
        self.gateway.fallback_host = self.url.split("://", 1)[1].rstrip("/")
        self._tasks.append(asyncio.create_task(self._purge_loop()))
        if self.data_file is not None:
            self._tasks.append(asyncio.create_task(self._flush_loop()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._http is not None:
            await self._http.close()
        self.flush()

    async def _purge_loop(self) -> None:
        while True:
            await asyncio.sleep(PURGE_INTERVAL_S)
            self.store.purge_expired()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            if self.store.changes != self._flushed_changes:
                changes, snapshot = self.store.changes, self.store.snapshot()
                # Documents are never mutated in place (every write stores a new dict), so
                # the snapshot can be serialised off the event loop.
                await asyncio.to_thread(self._write, changes, snapshot)

    def flush(self) -> None:
        if self.data_file is not None:
            self._write(self.store.changes, self.store.snapshot())

    def _write(self, changes: int, snapshot: dict[str, Any]) -> None:
        assert self.data_file is not None
        with self._write_lock:
            if changes < self._flushed_changes:
                return  # a newer snapshot is already on disk
            self.data_file.parent.mkdir(parents=True, exist_ok=True)
            # Write-then-rename, so a crash mid-write never leaves a truncated state file.
            fd, tmp = tempfile.mkstemp(prefix=".cosmos-emulator-", dir=self.data_file.parent)
            with os.fdopen(fd, "w") as fh:
                json.dump(snapshot, fh, separators=(",", ":"))
            os.replace(tmp, self.data_file)
            self._flushed_changes = changes


class RunningCosmosEmulator:
    """A started emulator on its own thread and event loop; `stop()` (or `with`) ends it."""

    def __init__(
        self, core: EmulatorCore, loop: asyncio.AbstractEventLoop, thread: threading.Thread
    ) -> None:
        self._core = core
        self._loop = loop
        self._thread = thread
        self._stopped = False

    @property
    def url(self) -> str:
        return self._core.url

    @property
    def key(self) -> str:
        return self._core.key

    @property
    def port(self) -> int:
        return self._core.port

    def inject_fault(
        self,
        status: int | None = 429,
        count: int = 1,
        delay_ms: int = 0,
        retry_after_ms: int = 10,
        method: str | None = None,
        path_contains: str | None = None,
        operation: str | None = None,
    ) -> dict[str, Any]:
        """Make the next `count` matching requests answer `status` (None: only delay)."""
        rule = self._core.faults.add(
            FaultRule(
                status=status,
                count=count,
                delay_ms=delay_ms,
                retry_after_ms=retry_after_ms,
                method=method,
                path_contains=path_contains,
                operation=operation,
            )
        )
        return rule.describe()

    def clear_faults(self) -> None:
        self._core.faults.clear()

    def pending_faults(self) -> list[dict[str, Any]]:
        return self._core.faults.describe()

    def stats(self) -> dict[str, int]:
        """Counts of what is stored, including expired items not yet purged."""
        store = self._core.store
        with store.lock:
            containers = [c for d in store.databases.values() for c in d.containers.values()]
            return {
                "databases": len(store.databases),
                "containers": len(containers),
                "stored_items": sum(len(p) for c in containers for p in c.partitions.values()),
            }

    def operation_counts(self) -> dict[str, int]:
        """Requests served per operation (Create, Read, Query, QueryPlan, Batch, ...)."""
        return dict(self._core.gateway.operation_counts)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        future = asyncio.run_coroutine_threadsafe(self._core.stop(), self._loop)
        future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> RunningCosmosEmulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_in_background(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    https: bool = False,
    data_file: str | os.PathLike[str] | None = None,
    key: str = WELL_KNOWN_KEY,
    log_requests: bool = False,
    limits: HttpLimits | None = None,
) -> RunningCosmosEmulator:
    """Start an emulator on its own thread; `port=0` picks a free port (see `.url`).

    `limits` replaces the HTTP limits (sizes, connections, timeouts): tests shorten them.
    """
    path = os.fspath(data_file) if data_file else None
    core = EmulatorCore(host, port, https, path, key, log_requests, limits)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(core.start())
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)
            started.set()
            loop.close()
            return
        started.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name=f"cosmos-emulator-{port}", daemon=True)
    thread.start()
    started.wait(timeout=30)
    if failure:
        raise failure[0]
    return RunningCosmosEmulator(core, loop, thread)


async def serve_forever(
    host: str,
    port: int,
    https: bool,
    data_file: str | None,
    key: str,
    stop: asyncio.Event,
    log_requests: bool = False,
) -> None:
    core = EmulatorCore(host, port, https, data_file, key, log_requests)
    await core.start()
    print(f"cosmos-emulator listening on {core.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await core.stop()
