"""Benchmark the Service Bus emulator with the real SDK; prints numbers, asserts nothing.

For 1 and 4 concurrent SDK clients (each its own process and connection) it measures
messages per second for sending (one message per `send_messages` call, as the app does) and
for PeekLock receive + complete, plus CPU seconds per message of the emulator process beside
the clients' CPU seconds per message. The emulator runs as `python -m servicebus_emulator` in
its own process so its CPU time can be read from /proc.

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
# The project's queue settings (the emulator's default config), under the bench's own name.
CONFIG = copy.deepcopy(DEFAULT_CONFIG)
CONFIG["UserConfig"]["Namespaces"][0]["Queues"][0]["Name"] = QUEUE


def _cpu_seconds_of(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sender(conn_str: str, count: int, prefix: str, barrier: Barrier, out: Any) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_queue_sender(QUEUE) as sender,
    ):
        sender.send_messages(ServiceBusMessage("warm-up", message_id=f"{prefix}-warm"))
        barrier.wait()
        cpu = _self_cpu()
        body = b"x" * 256
        for i in range(count):
            sender.send_messages(ServiceBusMessage(body, message_id=f"{prefix}-{i}"))
        out.put(("send", count, _self_cpu() - cpu))


def _receiver(conn_str: str, barrier: Barrier, out: Any) -> None:
    from azure.servicebus import ServiceBusClient

    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_queue_receiver(QUEUE, prefetch_count=20) as receiver,
    ):
        barrier.wait()
        cpu = _self_cpu()
        done = 0
        while True:
            msgs = receiver.receive_messages(max_message_count=20, max_wait_time=1)
            if not msgs:
                break
            for msg in msgs:
                receiver.complete_message(msg)
            done += len(msgs)
        # The final empty receive waited ~1 s idle; it costs almost no CPU and is
        # subtracted from the wall time by the parent.
        out.put(("receive", done, _self_cpu() - cpu))


def _phase(
    kind: str, conn_str: str, clients: int, total: int, emulator_pid: int
) -> dict[str, float]:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients + 1)
    out = ctx.Queue()
    procs = []
    for n in range(clients):
        if kind == "send":
            args: tuple[Any, ...] = (
                conn_str,
                total // clients,
                f"c{n}-{time.time_ns()}",
                barrier,
                out,
            )
            procs.append(ctx.Process(target=_sender, args=args))
        else:
            procs.append(ctx.Process(target=_receiver, args=(conn_str, barrier, out)))
    for p in procs:
        p.start()
    barrier.wait()
    emu_user, emu_sys = _cpu_seconds_of(emulator_pid)
    started = time.perf_counter()
    results = [out.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - started
    user, system = _cpu_seconds_of(emulator_pid)
    emu_user, emu_sys = user - emu_user, system - emu_sys
    emu_cpu = emu_user + emu_sys
    for p in procs:
        p.join()
    if kind == "receive":
        wall -= 1.0  # the receivers' last, empty 1 s wait
    messages = sum(r[1] for r in results)
    client_cpu = sum(r[2] for r in results)
    return {
        "messages": messages,
        "wall_s": wall,
        "msgs_per_s": messages / wall,
        "emulator_cpu_us_per_msg": 1e6 * emu_cpu / max(messages, 1),
        "emulator_sys_share": emu_sys / emu_cpu if emu_cpu else 0.0,
        "clients_cpu_us_per_msg": 1e6 * client_cpu / max(messages, 1),
    }


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
            for clients in (int(c) for c in args.clients.split(",")):
                for kind in ("send", "receive"):
                    r = _phase(kind, conn_str, clients, args.messages, emulator.pid)
                    label = (
                        "send (1 msg per call)" if kind == "send" else "PeekLock receive + complete"
                    ) + f", {clients} client(s)"
                    ratio = r["emulator_cpu_us_per_msg"] / max(r["clients_cpu_us_per_msg"], 1e-9)
                    print(
                        f"{label:<42}{r['messages']:>7.0f}{r['wall_s']:>9.2f}"
                        f"{r['msgs_per_s']:>9.0f}{r['emulator_cpu_us_per_msg']:>17.0f}"
                        f"{r['clients_cpu_us_per_msg']:>16.0f}{ratio:>7.2f}"
                        f"{100 * r['emulator_sys_share']:>9.0f}%"
                    )
        finally:
            emulator.terminate()
            emulator.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
