"""Run the emulator: in a background thread (tests, demo) or in the foreground (CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .auth import WELL_KNOWN_KEY
from .fault_access import checked_fault_token, new_fault_token
from .faults import FaultInjector, FaultRule
from .gateway import Gateway
from .hosts import HostAllowList, split_authority
from .http11 import HttpServer
from .http_limits import HttpLimits
from .journal import Journal, JournalError
from .ranges import checked_range_count
from .store import Store

PURGE_INTERVAL_S = 0.5
_LOG = logging.getLogger("cosmos_emulator")


class EmulatorCore:
    """Everything that runs on the emulator's event loop."""

    def __init__(
        self,
        host: str,
        port: int,
        https: bool,
        data_dir: str | None,
        key: str,
        log_requests: bool = False,
        limits: HttpLimits | None = None,
        *,
        fsync: bool = False,
        allowed_hosts: Sequence[str] = (),
        fault_token: str | None = None,
        partition_ranges: int = 1,
    ) -> None:
        self.host = host
        self.limits = limits or HttpLimits()
        self.requested_port = port
        self.https = https
        self.data_dir = Path(data_dir) if data_dir else None
        self.fsync = fsync
        for spec in allowed_hosts:
            split_authority(spec)  # a malformed one fails at start, not per request
        self.allowed_hosts = tuple(allowed_hosts)
        self.key = key
        # None: one of its own, which only the starter learns (`fault_token`, or printed).
        self.fault_token = checked_fault_token(
            new_fault_token() if fault_token is None else fault_token
        )
        self.store = Store()
        self.store.partition_ranges = checked_range_count(partition_ranges)
        self.journal: Journal | None = None
        self.faults = FaultInjector()
        self.gateway = Gateway(
            self.store, key, self.faults, "https" if https else "http", self.fault_token
        )
        self.gateway.log_requests = log_requests
        self.port = 0
        self._http: HttpServer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.https else 'http'}://{host}:{self.port}/"

    async def start(self) -> None:
        if self.data_dir is not None:
            journal = Journal(self.data_dir, fsync=self.fsync)
            journal.open(self.store)  # JournalError when the directory cannot be used
            self.journal = journal
        ssl_context = None
        if self.https:
            from .tls import self_signed_context

            ssl_context = self_signed_context(self.host)
        self._http = HttpServer(self.gateway.handle, ssl_context, self.limits)
        try:
            self.port = await self._http.start(self.host, self.requested_port)
        except BaseException:
            if self.journal is not None:
                self.journal.close()
            raise
        self.gateway.fallback_host = self.url.split("://", 1)[1].rstrip("/")
        self.gateway.hosts = HostAllowList(self.host, self.port, self.allowed_hosts)
        self._tasks.append(asyncio.create_task(self._purge_loop()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._http is not None:
            await self._http.close()
        if self.journal is not None:
            with self.store.lock:
                self.journal.close()

    async def _purge_loop(self) -> None:
        while True:
            await asyncio.sleep(PURGE_INTERVAL_S)
            if self.journal is not None and not self.journal.accepts_writes:
                # Expired items are already invisible; purging on a full disk would only undo
                # itself. A request's write that passes resumes it.
                continue
            with self.store.lock:
                self.store.purge_expired()
                try:
                    self.store.commit()
                except JournalError as exc:  # undone; the purge waits for the disk
                    _LOG.error("cosmos-emulator: %s", exc)


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

    @property
    def fault_token(self) -> str:
        """What HTTP requests to `/_emulator/faults` send as `Authorization: Bearer`."""
        return self._core.fault_token

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

    def split_range(self, database: str, container: str, range_id: str) -> list[str]:
        """Split a container's partition key range `range_id` in two at its EPK midpoint, as
        Cosmos splits a physical partition; the children's ids. From then on a request naming
        `range_id` is answered 410 Gone, substatus 1002, and `/pkranges` lists the children
        with `parents`. Journaled before it returns. ValueError when the range is not live
        (or the container is on hash V1); CosmosError (404) for an unknown container."""
        return list(
            self._core.gateway.change_ranges(
                {"database": database, "container": container, "split": range_id}
            )["made"]
        )

    def merge_ranges(self, database: str, container: str, first_id: str, second_id: str) -> str:
        """Merge two adjacent partition key ranges into one; its id. The two ids are gone
        (410: substatus 1007 to the change feed and bulk, 1002 to queries)."""
        made = self._core.gateway.change_ranges(
            {"database": database, "container": container, "merge": [first_id, second_id]}
        )["made"]
        return str(made[0])

    def partition_key_range_ids(self, database: str, container: str) -> list[str]:
        """The ids of a container's live partition key ranges, in EPK order."""
        store = self._core.store
        with store.lock:
            return store.find_container(database, container).ranges.ids()

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
    data_dir: str | os.PathLike[str] | None = None,
    fsync: bool = False,
    key: str = WELL_KNOWN_KEY,
    log_requests: bool = False,
    limits: HttpLimits | None = None,
    allowed_hosts: Sequence[str] = (),
    fault_token: str | None = None,
    partition_ranges: int = 1,
) -> RunningCosmosEmulator:
    """Start an emulator on its own thread; `port=0` picks a free port (see `.url`).

    `data_dir` keeps the account in a journal there (see journal.py); `fsync` also syncs it
    to disk before each answer. `allowed_hosts` adds `NAME[:PORT]` values of `Host` to serve.
    `limits` replaces the HTTP limits (sizes, connections, timeouts): tests shorten them.
    `fault_token` is what the fault endpoint requires (None: a random one, `.fault_token`);
    `inject_fault()` needs none. `partition_ranges` is how many partition key ranges each
    container created from then on gets at least (more when its throughput needs them).
    """
    path = os.fspath(data_dir) if data_dir else None
    core = EmulatorCore(
        host,
        port,
        https,
        path,
        key,
        log_requests,
        limits,
        fsync=fsync,
        allowed_hosts=allowed_hosts,
        fault_token=fault_token,
        partition_ranges=partition_ranges,
    )
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
    data_dir: str | None,
    key: str,
    stop: asyncio.Event,
    log_requests: bool = False,
    *,
    fsync: bool = False,
    allowed_hosts: Sequence[str] = (),
    fault_token: str | None = None,
    partition_ranges: int = 1,
) -> None:
    """`fault_token` None: a random one, printed on the line after the ready line."""
    core = EmulatorCore(
        host,
        port,
        https,
        data_dir,
        key,
        log_requests,
        fsync=fsync,
        allowed_hosts=allowed_hosts,
        fault_token=fault_token,
        partition_ranges=partition_ranges,
    )
    await core.start()
    print(f"cosmos-emulator listening on {core.url}", flush=True)
    if fault_token is None:  # drawn here: whoever started it has no other way to know it
        print(f"cosmos-emulator fault token: {core.fault_token}", flush=True)
    try:
        await stop.wait()
    finally:
        await core.stop()
