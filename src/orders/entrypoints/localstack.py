"""The embedded local stack: our two emulators and worker processes, on free ports.

Used by `orders demo`, the end-to-end tests and the benchmark. Every process it starts runs in
its own process group and is stopped by its own pid, so nothing is left behind.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exactly_once.options import DEFAULT_LEASE_SECONDS
from orders.entrypoints.local_entities import LocalEntities, merged_servicebus_config
from orders.service.registry import CONSUMERS
from orders.settings import EMULATOR_COSMOS_KEY, Settings

DEFAULTS = Settings(cosmos_endpoint="")  # the settings' own defaults, for the child processes

SERVICEBUS_READY = re.compile(r"servicebus-emulator listening on (\S+):(\d+)")
COSMOS_READY = re.compile(r"cosmos-emulator listening on (\S+)")
PAYMENTS_READY = re.compile(r"payments-standin listening on (\S+):(\d+)")
# Where the Cosmos emulator and the payment stand-in read the token their fault switches need.
COSMOS_FAULT_TOKEN_ENV = "COSMOS_EMULATOR_FAULT_TOKEN"
PAYMENTS_FAULT_TOKEN_ENV = "PAYMENTS_STANDIN_FAULT_TOKEN"
# Where the stand-in reads the token its money routes need; the app reads it as PAYMENTS_TOKEN.
PAYMENTS_MONEY_TOKEN_ENV = "PAYMENTS_STANDIN_TOKEN"
STARTUP_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class QueueOptions:
    """The demo queue and events topic: the official emulator's shortest legal window keeps the
    demo quick."""

    name: str = "orders"
    duplicate_window_seconds: int = 5
    lock_seconds: int = 30
    max_delivery_count: int = 10
    events_topic: str = DEFAULTS.order_events_topic
    # One per registered consumer of the events topic, under its own name.
    subscriptions: tuple[str, ...] = tuple(
        spec.name for spec in CONSUMERS if spec.subscription is not None
    )
    status_queue: str = DEFAULTS.status_queue
    # The status queue with sessions (SessionId = orderId) instead of versions alone.
    status_sessions: bool = False

    def _queue(self, name: str, *, sessions: bool = False) -> dict[str, Any]:
        return {
            "Name": name,
            "Properties": {
                "DeadLetteringOnMessageExpiration": True,
                "DefaultMessageTimeToLive": "PT1H",
                "DuplicateDetectionHistoryTimeWindow": f"PT{self.duplicate_window_seconds}S",
                "LockDuration": f"PT{self.lock_seconds}S",
                "MaxDeliveryCount": self.max_delivery_count,
                "RequiresDuplicateDetection": True,
                "RequiresSession": sessions,
            },
        }

    def _subscription(self, name: str) -> dict[str, Any]:
        return {
            "Name": name,
            "Properties": {
                "DeadLetteringOnMessageExpiration": True,
                "DefaultMessageTimeToLive": "PT1H",
                "LockDuration": f"PT{self.lock_seconds}S",
                "MaxDeliveryCount": self.max_delivery_count,
                "RequiresSession": False,
            },
        }

    def config(self) -> dict[str, Any]:
        return {
            "UserConfig": {
                "Namespaces": [
                    {
                        "Name": "sbemulatorns",
                        "Queues": [
                            self._queue(self.name),
                            self._queue(self.status_queue, sessions=self.status_sessions),
                        ],
                        "Topics": [
                            {
                                "Name": self.events_topic,
                                "Properties": {
                                    "DefaultMessageTimeToLive": "PT1H",
                                    "DuplicateDetectionHistoryTimeWindow": (
                                        f"PT{self.duplicate_window_seconds}S"
                                    ),
                                    "RequiresDuplicateDetection": True,
                                },
                                "Subscriptions": [
                                    self._subscription(name) for name in self.subscriptions
                                ],
                            }
                        ],
                    }
                ],
                "Logging": {"Type": "Console"},
            }
        }


@dataclass
class ManagedProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def decisions_path(self) -> Path:
        return self.log_path.with_suffix(".decisions.jsonl")

    def journal(self) -> list[dict[str, Any]]:
        """Every line of a worker's journal (`--decisions`): decisions and backoffs."""
        if not self.decisions_path.exists():
            return []
        lines = self.decisions_path.read_text(encoding="utf-8").splitlines()
        # A line being written when a worker was killed is incomplete: it never counted.
        return [json.loads(line) for line in lines if line.endswith("}")]

    def decisions(self) -> list[dict[str, Any]]:
        """What a worker decided, one entry per decision made (a transient one decided again
        after a backoff included)."""
        return [entry for entry in self.journal() if "backoff" not in entry]

    def backoffs(self) -> list[dict[str, Any]]:
        """Each wait a worker announced before deciding a message again (`backoff` lines)."""
        return [entry["backoff"] for entry in self.journal() if "backoff" in entry]

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.running:
            os.kill(self.process.pid, signum)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        self.signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.process.wait(timeout=10)


def how_it_ended(managed: ManagedProcess) -> str:
    code = managed.process.returncode
    if code is None or code == 0:
        return ""
    if code < 0:  # uvicorn re-raises the SIGTERM it handled, after its graceful shutdown
        return f" (ended by {signal.Signals(-code).name})"
    return f" (exit code {code})"


def stop_together(
    group: list[ManagedProcess],
    report: Callable[[str], None],
    timeout: float = STOP_TIMEOUT_SECONDS,
) -> None:
    """SIGTERM to every process of `group` at once, then report each as it exits (SIGKILL
    after `timeout`): one slow drain no longer adds up with the next one's."""
    pending = [managed for managed in group if managed.running]
    if not pending:
        return
    report(f"stopping {', '.join(managed.name for managed in pending)}")
    started = time.monotonic()
    for managed in pending:
        managed.signal(signal.SIGTERM)
    while pending:
        for managed in [m for m in pending if not m.running]:
            pending.remove(managed)
            report(
                f"stopped {managed.name} in {time.monotonic() - started:.1f} s"
                f"{how_it_ended(managed)}"
            )
        if pending and time.monotonic() - started > timeout:
            for managed in pending:
                managed.signal(signal.SIGKILL)
                managed.process.wait(timeout=10)
                report(f"killed {managed.name}: it did not stop in {timeout:g} s")
            return
        time.sleep(0.02)  # polling the children's exit, bounded by the timeout above


def _wait_for_line(managed: ManagedProcess, pattern: re.Pattern[str]) -> re.Match[str]:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        match = pattern.search(managed.log())
        if match:
            return match
        if not managed.running:
            raise RuntimeError(f"{managed.name} exited early:\n{managed.log()[-2000:]}")
        time.sleep(0.05)  # polling the child's log file for its ready line, bounded above
    raise TimeoutError(f"{managed.name} did not report ready in {STARTUP_TIMEOUT_SECONDS} s")


@contextmanager
def signals_deferred(signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """SIGINT and SIGTERM wait for the block's end, then reach their handlers as they would
    have: between starting a child and recording it, a Ctrl-C (`orders up`, `orders demo`)
    would leave a child that no stop ever reaches. Python runs handlers in the main thread
    only, so elsewhere this defers nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda signum, frame: caught.append(signum))
        for signum in signums
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for signum in caught:
            signal.raise_signal(signum)


@dataclass
class LocalStack:
    workdir: Path
    queue: QueueOptions = field(default_factory=QueueOptions)
    processes: list[ManagedProcess] = field(default_factory=list)
    servicebus_connection_string: str = ""
    cosmos_endpoint: str = ""
    payments_url: str = ""
    # Where the Service Bus emulator journals its messages and the Cosmos emulator keeps its
    # account (each one's `--data`); None keeps them in memory.
    servicebus_data: Path | None = None
    cosmos_data: Path | None = None
    # What the Cosmos emulator's and the payment stand-in's fault switches need as
    # `Authorization: Bearer`: one per stack, handed to them in their environment (a command
    # line is readable by every local user), never to the workers.
    fault_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    # What the stand-in's money routes (`POST /payments`, `POST /refunds`) need as
    # `Authorization: Bearer`: the app's processes get it as PAYMENTS_TOKEN, so a web page or a
    # local process without it moves no money.
    payments_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    # A user's own queues, topics and containers (`orders up --entities`), beside the app's.
    entities: LocalEntities | None = None
    # Partition key ranges each Cosmos container gets (`--partition-ranges`): 1 is fastest;
    # more runs the SDK's per-range paths (feed ranges, fanned-out queries) as Cosmos would.
    cosmos_partition_ranges: int = 1
    _worker_count: int = 0

    def spawn(
        self, name: str, args: list[str], env: Mapping[str, str] | None = None
    ) -> ManagedProcess:
        log_path = self.workdir / f"{name}.log"
        with signals_deferred():
            with log_path.open("wb") as log_file:
                process = subprocess.Popen(
                    [sys.executable, *args],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
                    start_new_session=True,  # Ctrl-C in the terminal reaches us, we stop them
                )
            managed = ManagedProcess(name, process, log_path)
            self.processes.append(managed)
        return managed

    def start_emulators(self) -> None:
        config_path = self.workdir / "servicebus-config.json"
        config = self.queue.config()
        if self.entities is not None:
            config = merged_servicebus_config(config, self.entities)
        config_path.write_text(json.dumps(config, indent=2))
        data = ["--data", str(self.servicebus_data)] if self.servicebus_data else []
        servicebus = self.spawn(
            "servicebus-emulator",
            ["-m", "servicebus_emulator", "--host", "127.0.0.1", "--port", "0",
             "--config", str(config_path), *data],
        )  # fmt: skip
        cosmos_data = ["--data", str(self.cosmos_data)] if self.cosmos_data else []
        if self.cosmos_partition_ranges != 1:
            cosmos_data += ["--partition-ranges", str(self.cosmos_partition_ranges)]
        cosmos = self.spawn(
            "cosmos-emulator",
            ["-m", "cosmos_emulator", "--host", "127.0.0.1", "--port", "0", *cosmos_data],
            env={COSMOS_FAULT_TOKEN_ENV: self.fault_token},
        )
        host, port = _wait_for_line(servicebus, SERVICEBUS_READY).groups()
        self.servicebus_connection_string = (
            f"Endpoint=sb://{host}:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
        )
        self.cosmos_endpoint = _wait_for_line(cosmos, COSMOS_READY).group(1)

    def environment(self) -> dict[str, str]:
        return {
            "ServiceBusConnection": self.servicebus_connection_string,
            "ORDERS_QUEUE": self.queue.name,
            "COSMOS_ENDPOINT": self.cosmos_endpoint,
            "COSMOS_KEY": EMULATOR_COSMOS_KEY,
            "COSMOS_DATABASE": DEFAULTS.cosmos_database,
            "COSMOS_CONTAINER": DEFAULTS.cosmos_container,
            "COSMOS_IDEMPOTENCY_CONTAINER": DEFAULTS.cosmos_idempotency_container,
            "ORDER_EVENTS_TOPIC": self.queue.events_topic,
            "STATUS_QUEUE": self.queue.status_queue,
            "STATUS_SESSIONS": "true" if self.queue.status_sessions else "false",
            # The window the stack's queues were created with: the tools wait it out by this.
            "ORDERS_DUPLICATE_WINDOW_SECONDS": str(self.queue.duplicate_window_seconds),
            **(
                {"PAYMENTS_URL": self.payments_url, "PAYMENTS_TOKEN": self.payments_token}
                if self.payments_url
                else {}
            ),
        }

    def fault_environment(self) -> dict[str, str]:
        """The fault switches' tokens, under the names the emulator and the stand-in read:
        what an operator exports to inject faults by hand (`orders env`)."""
        tokens = {COSMOS_FAULT_TOKEN_ENV: self.fault_token}
        if self.payments_url:
            tokens[PAYMENTS_FAULT_TOKEN_ENV] = self.fault_token
        return tokens

    def settings(self) -> Settings:
        return Settings.from_env(self.environment())

    def start_worker(
        self,
        *,
        concurrency: int = 4,
        prefetch: int = 0,
        extra_env: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        self._worker_count += 1
        name = f"worker-{self._worker_count}"
        return self.spawn(
            name,
            ["-m", "orders", "worker", "--concurrency", str(concurrency),
             "--prefetch", str(prefetch),
             "--decisions", str(self.workdir / f"{name}.decisions.jsonl")],
            env={**self.environment(), **(extra_env or {})},
        )  # fmt: skip

    def start_subscriber(
        self, subscriber: str, *, extra_env: Mapping[str, str] | None = None
    ) -> ManagedProcess:
        """A worker for one registered consumer (`orders.service.registry`): its subscription of
        the events topic, or the status queue."""
        name = f"{subscriber}-{sum(p.name.startswith(subscriber) for p in self.processes) + 1}"
        return self.spawn(
            name,
            ["-m", "orders", "worker", "--subscription", subscriber,
             "--decisions", str(self.workdir / f"{name}.decisions.jsonl")],
            env={**self.environment(), **(extra_env or {})},
        )  # fmt: skip

    def start_payments(self, *, extra_args: list[str] | None = None) -> ManagedProcess:
        """The payment service stand-in, durable under the stack's folder."""
        payments = self.spawn(
            "payments-standin",
            ["-m", "payments_standin", "--host", "127.0.0.1", "--port", "0",
             "--data", str(self.workdir / "payments"), *(extra_args or [])],
            env={
                PAYMENTS_FAULT_TOKEN_ENV: self.fault_token,
                PAYMENTS_MONEY_TOKEN_ENV: self.payments_token,
            },
        )  # fmt: skip
        host, port = _wait_for_line(payments, PAYMENTS_READY).groups()
        self.payments_url = f"http://{host}:{port}"
        return payments

    def start_dispatcher(
        self,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        extra_env: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        name = f"dispatcher-{sum(p.name.startswith('dispatcher') for p in self.processes) + 1}"
        return self.spawn(
            name,
            ["-m", "orders", "dispatcher", "--lease-seconds", str(lease_seconds)],
            env={**self.environment(), **(extra_env or {})},
        )

    def workers(self) -> list[ManagedProcess]:
        return [p for p in self.processes if p.name.startswith("worker-")]

    def stop_workers(self) -> list[int]:
        """Stop the order workers still running, all at once (each drains in parallel), and
        return their exit codes in start order."""
        running = [worker for worker in self.workers() if worker.process.returncode is None]
        stop_together(running, lambda line: None)
        return [worker.process.wait() for worker in running]

    def stop(self, report: Callable[[str], None] | None = None) -> None:
        """Workers, dispatchers and services first, all at once (they drain through the
        emulators), then the emulators and the payment stand-in; `report` hears each step."""
        last = [p for p in self.processes if p.name.endswith(("-emulator", "-standin"))]
        first = [p for p in self.processes if p not in last]
        for group in (first, last):
            stop_together(group, report or (lambda line: None))


@contextmanager
def local_stack(
    queue: QueueOptions | None = None,
    workdir: Path | None = None,
    *,
    servicebus_data: Path | None = None,
    cosmos_data: Path | None = None,
    report: Callable[[str], None] | None = None,
    entities: LocalEntities | None = None,
    cosmos_partition_ranges: int = 1,
) -> Iterator[LocalStack]:
    """`report` hears what is stopped, as it stops; `entities` are a user's own, added;
    `cosmos_partition_ranges` is how many partition key ranges each Cosmos container gets."""
    with tempfile.TemporaryDirectory(prefix="orders-stack-") as scratch:
        stack = LocalStack(
            Path(workdir or scratch),
            queue or QueueOptions(),
            servicebus_data=servicebus_data,
            cosmos_data=cosmos_data,
            entities=entities,
            cosmos_partition_ranges=cosmos_partition_ranges,
        )
        try:
            stack.start_emulators()
            yield stack
        finally:
            stack.stop(report)
