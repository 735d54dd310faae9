"""Benchmark the Service Bus emulator with the real SDK; prints numbers, asserts nothing.

For 1 and 4 concurrent SDK clients (each its own process and connection) it measures
messages per second for sending (one message per `send_messages` call, as the app does) and
for PeekLock receive + complete, plus CPU seconds per message of the emulator process beside
the clients' CPU seconds per message. It does so for a queue, then for a topic with two
subscriptions (`--clients` senders to the topic, then that many receivers on each
subscription at once, with msgs/s per subscription). The emulator runs as
`python -m servicebus_emulator` in its own process so its CPU time can be read from /proc.

    .venv/bin/python scripts/bench_emulator.py --messages 2000
    .venv/bin/python scripts/bench_emulator.py --messages 2000 --data   # journal (--fsync too)
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing as mp
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from servicebus_emulator.config import DEFAULT_CONFIG

REPO = Path(__file__).resolve().parents[1]
QUEUE = "bench"
TOPIC = "bench-events"
SUBSCRIPTIONS = ("a", "b")
# The project's queue settings (the emulator's default config), under the bench's own name;
# a topic with the same duplicate detection and subscriptions with the queue's settings.
CONFIG = copy.deepcopy(DEFAULT_CONFIG)
_NAMESPACE = CONFIG["UserConfig"]["Namespaces"][0]
_NAMESPACE["Queues"][0]["Name"] = QUEUE
_QUEUE_PROPERTIES = _NAMESPACE["Queues"][0]["Properties"]
_NAMESPACE["Topics"] = [
    {
        "Name": TOPIC,
        "Properties": {
            key: _QUEUE_PROPERTIES[key]
            for key in (
                "DefaultMessageTimeToLive",
                "DuplicateDetectionHistoryTimeWindow",
                "RequiresDuplicateDetection",
            )
        },
        "Subscriptions": [
            {
                "Name": name,
                "Properties": {
                    key: _QUEUE_PROPERTIES[key]
                    for key in (
                        "DeadLetteringOnMessageExpiration",
                        "DefaultMessageTimeToLive",
                        "LockDuration",
                        "MaxDeliveryCount",
                        "RequiresSession",
                    )
                },
            }
            for name in SUBSCRIPTIONS
        ],
    }
]


def _cpu_seconds_of(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sender(
    conn_str: str, topic: bool, count: int, prefix: str, barrier: Barrier, out: Any
) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_topic_sender(TOPIC) if topic else client.get_queue_sender(QUEUE) as sender,
    ):
        sender.send_messages(ServiceBusMessage("warm-up", message_id=f"{prefix}-warm"))
        barrier.wait()
        cpu = _self_cpu()
        body = b"x" * 256
        for i in range(count):
            sender.send_messages(ServiceBusMessage(body, message_id=f"{prefix}-{i}"))
        out.put(("send", count, _self_cpu() - cpu, time.monotonic()))


def _receiver(conn_str: str, subscription: str | None, barrier: Barrier, out: Any) -> None:
    from azure.servicebus import ServiceBusClient

    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_subscription_receiver(TOPIC, subscription, prefetch_count=20)
        if subscription
        else client.get_queue_receiver(QUEUE, prefetch_count=20) as receiver,
    ):
        barrier.wait()
        cpu = _self_cpu()
        done = 0
        finished = time.monotonic()
        while True:
            msgs = receiver.receive_messages(max_message_count=20, max_wait_time=1)
            if not msgs:
                break
            for msg in msgs:
                receiver.complete_message(msg)
            done += len(msgs)
            finished = time.monotonic()
        # The final empty receive waited ~1 s idle; it costs almost no CPU and is not counted
        # in the wall time (`finished` is the last message's completion).
        out.put((subscription or "receive", done, _self_cpu() - cpu, finished))


def _phase(
    kind: str, conn_str: str, clients: int, total: int, emulator_pid: int, topic: bool
) -> dict[str, Any]:
    """One scenario; for receives from the topic, `clients` receivers on each subscription."""
    ctx = mp.get_context("fork")
    sources: tuple[str | None, ...] = SUBSCRIPTIONS if topic else (None,)
    receivers = clients * len(sources) if kind == "receive" else 0
    barrier = ctx.Barrier((receivers or clients) + 1)
    out = ctx.Queue()
    procs = []
    if kind == "send":
        for n in range(clients):
            prefix = f"c{n}-{time.time_ns()}"
            args: tuple[Any, ...] = (conn_str, topic, total // clients, prefix, barrier, out)
            procs.append(ctx.Process(target=_sender, args=args))
    else:
        for source in sources:
            for _ in range(clients):
                args = (conn_str, source, barrier, out)
                procs.append(ctx.Process(target=_receiver, args=args))
    for p in procs:
        p.start()
    barrier.wait()
    emu_user, emu_sys = _cpu_seconds_of(emulator_pid)
    started = time.monotonic()
    results = [out.get(timeout=600) for _ in procs]
    user, system = _cpu_seconds_of(emulator_pid)
    emu_user, emu_sys = user - emu_user, system - emu_sys
    emu_cpu = emu_user + emu_sys
    for p in procs:
        p.join()
    wall = max(r[3] for r in results) - started
    messages = sum(r[1] for r in results)
    client_cpu = sum(r[2] for r in results)
    # Per subscription: its messages over the time its own receivers took.
    per_source = {
        str(source): sum(r[1] for r in results if r[0] == source)
        / max(max(r[3] for r in results if r[0] == source) - started, 1e-9)
        for source in sources
        if kind == "receive" and source is not None
    }
    return {
        "messages": messages,
        "wall_s": wall,
        "msgs_per_s": messages / wall,
        "emulator_cpu_us_per_msg": 1e6 * emu_cpu / max(messages, 1),
        "emulator_sys_share": emu_sys / emu_cpu if emu_cpu else 0.0,
        "clients_cpu_us_per_msg": 1e6 * client_cpu / max(messages, 1),
        "per_subscription": per_source,
    }


def _label(kind: str, topic: bool, clients: int) -> str:
    if kind == "send":
        what = "topic send (1 msg per call)" if topic else "send (1 msg per call)"
        return f"{what}, {clients} client(s)"
    if topic:
        return f"topic receive + complete, {clients} per sub"
    return f"PeekLock receive + complete, {clients} client(s)"


def _print_row(label: str, r: dict[str, Any]) -> None:
    ratio = r["emulator_cpu_us_per_msg"] / max(r["clients_cpu_us_per_msg"], 1e-9)
    print(
        f"{label:<42}{r['messages']:>7.0f}{r['wall_s']:>9.2f}"
        f"{r['msgs_per_s']:>9.0f}{r['emulator_cpu_us_per_msg']:>17.0f}"
        f"{r['clients_cpu_us_per_msg']:>16.0f}{ratio:>7.2f}"
        f"{100 * r['emulator_sys_share']:>9.0f}%"
    )
    for name, rate in r["per_subscription"].items():
        print(f"{'  subscription ' + name:<42}{'':>7}{'':>9}{rate:>9.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages per scenario")
    parser.add_argument("--clients", default="1,4", help="comma-separated client counts")
    parser.add_argument(
        "--data", action="store_true", help="run the emulator with --data (a temporary dir)"
    )
    parser.add_argument("--fsync", action="store_true", help="with --data: also --fsync")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(CONFIG), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        persistence = ["--data", str(Path(tmp) / "data")] if args.data else []
        persistence += ["--fsync"] if args.data and args.fsync else []
        emulator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servicebus_emulator",
                "--port",
                "0",
                "--config",
                str(config),
                *persistence,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert emulator.stdout is not None
            line = emulator.stdout.readline()
            match = re.search(r":(\d+)$", line.strip())
            if not match:
                print(f"emulator did not start: {line!r}", file=sys.stderr)
                return 1
            port = int(match.group(1))
            conn_str = (
                f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAcc"
                "essKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
            )
            print(
                f"cores: {os.cpu_count()}  python: {sys.version.split()[0]}  "
                f"messages per scenario: {args.messages}  "
                f"persistence: {' '.join(persistence[:1] + persistence[2:]) or 'none'}"
            )
            header = (
                f"{'scenario':<42}{'msgs':>7}{'wall s':>9}{'msgs/s':>9}"
                f"{'emulator us/msg':>17}{'clients us/msg':>16}{'ratio':>7}{'emu sys%':>10}"
            )
            print(header)
            print("-" * len(header))
            for topic in (False, True):
                for clients in (int(c) for c in args.clients.split(",")):
                    for kind in ("send", "receive"):
                        r = _phase(kind, conn_str, clients, args.messages, emulator.pid, topic)
                        _print_row(_label(kind, topic, clients), r)
        finally:
            emulator.terminate()
            emulator.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
