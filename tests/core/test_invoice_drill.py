"""The invoice drill (issue 34, "Done when"): a consumer the guide does not show, its effect in a
partition other than the key's, under competing worker processes, SIGKILLs and a Cosmos outage.

Everything runs as a process of its own, the way a user runs it: our Service Bus and Cosmos DB
emulators (`python -m ...`), and 3 workers per queue (invoice_drill_worker.py: the guide's
`run_worker` around the invoicing consumer, whose invoice and ledger entry go into the
customer's partition through `effects.inbox`, or around the e-mail consumer, which calls its
provider through `two_phase` with a downstream key). The load, on both queues: 200 invoices,
60 resends (same MessageId, same body), 10 MessageId reuses whose body names another customer
and amount, 3 poison bodies. During it, 8 SIGKILLs of random workers (each restarted at once:
the messages they held come back when their 10 s locks lapse, their claims are taken over when
their 10 s leases end) and a 10 s Cosmos outage (every request answers 503, switched by the
emulator's fault endpoint), with a kill in the middle of it.

Then: every invoice is stored once, with one ledger entry, in its customer's partition; every
e-mail key reached the provider with its own invoice's body only; no decision said `processed`
twice for one message; every reuse is dead-lettered as a mismatch (with the reuse's body), every
poison message with its reason, and no valid message is dead-lettered. The outage was felt (the
workers decided `transient_failure` and backed off in place) and spent no deliveries: no
message came back more often than its consumer's workers were killed.

What it catches (each tried by breaking the core on purpose): a key judged in the partition
the body names (the reuses are processed again, in their other customers' partitions), a claim
owned per process rather than per delivery (two copies decided at once in one worker both say
`processed`), and no backoff (the outage alone redelivers a held message 5 to 8 times).

36 to 43 s on a 2-core machine that other jobs were using (load average 2 to 4.5): the load is
decided in seconds; the kills and the outage cost their lock, lease and outage lengths.
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.cosmos import CosmosClient, PartitionKey
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from core_support import queue_config
from invoice_drill_worker import (
    CONTAINER,
    DATABASE,
    LOCK_SECONDS,
    MAX_DELIVERY_COUNT,
    QUEUE_OF,
    READY_LINE,
)
from invoicing import INVOICE_EMAILS, INVOICING, InvoiceIssued, invoice, mail_key, mail_text
from servers import stop_process, wait_for_output

from cosmos_emulator import WELL_KNOWN_KEY
from exactly_once import DeadLetterReason
from exactly_once.cosmos import RECORD_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INVOICES, RESENDS, REUSES, WORKERS_PER_QUEUE = 200, 60, 10, 3
OUTAGE_SECONDS = 10.0
POISON = {
    "poison-not-json": b"an invoice, honestly",
    "poison-no-customer": b'{"invoice_id": "p-2", "amount_cents": 100}',
    "poison-amount": b'{"invoice_id": "p-3", "customer_id": "c-p", "amount_cents": "lots"}',
}
# When a random worker of a consumer is SIGKILLed, by how many messages that consumer has settled
# (counting settlements, not seconds, keeps the drill the same under load and the consumers
# apart: the invoicing one settles its half of the load within a second or two, the e-mail one
# takes several). Each kill lands while its queue has a backlog, so the victim holds messages:
# 2 kills per consumer in the first half of the load, one per consumer during the outage (every
# worker then holds messages waiting out a backoff), one per consumer after it (counted from
# the outage's end, as the second half, sent during the outage, is decided).
KILLS_BEFORE_OUTAGE = (
    (INVOICING, 50),
    (INVOICE_EMAILS, 50),
    (INVOICING, 100),
    (INVOICE_EMAILS, 100),
)
OUTAGE_WHEN_EACH_SETTLED = 120  # of the first half's 141 a consumer
KILLS_INTO_OUTAGE = ((INVOICING, 4.0), (INVOICE_EMAILS, 6.0))  # (consumer, seconds into it)
KILLS_AFTER_OUTAGE = ((INVOICING, 40), (INVOICE_EMAILS, 40))
WORKER = Path(__file__).with_name("invoice_drill_worker.py")
SERVICEBUS_READY = re.compile(r"servicebus-emulator listening on (\S+):(\d+)")
COSMOS_READY = re.compile(r"cosmos-emulator listening on (\S+)")


@dataclass(frozen=True)
class Emulators:
    servicebus_connection: str
    cosmos_endpoint: str
    fault_token: str

    def worker_environment(self, base: dict[str, str]) -> dict[str, str]:
        """What a worker reads, under the names `orders env` prints (no fault token)."""
        return {
            **base,
            "ServiceBusConnection": self.servicebus_connection,
            "COSMOS_ENDPOINT": self.cosmos_endpoint,
            "COSMOS_KEY": WELL_KNOWN_KEY,
            "PYTHONUNBUFFERED": "1",
        }

    def cosmos_outage(self, on: bool) -> None:
        """Every request to the account answers 503 (on) until the faults are cleared (off)."""
        url = f"{self.cosmos_endpoint}_emulator/faults"
        bearer = {"Authorization": f"Bearer {self.fault_token}"}
        if on:
            rule = {"status": 503, "count": 1_000_000}
            httpx.post(url, json=rule, headers=bearer, timeout=10).raise_for_status()
        else:
            httpx.delete(url, headers=bearer, timeout=10).raise_for_status()


def start_logged(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, *args], stdout=sink, stderr=subprocess.STDOUT, env=env
        )


@pytest.fixture
def emulators(tmp_path: Path, reaped_env: dict[str, str]) -> Iterator[Emulators]:
    """Both emulators as processes on free ports, stopped by their pids (and reaped)."""
    config = queue_config(QUEUE_OF[INVOICING], max_delivery_count=MAX_DELIVERY_COUNT)
    namespace = config["UserConfig"]["Namespaces"][0]
    [queue] = namespace["Queues"]
    queue["Properties"]["LockDuration"] = f"PT{LOCK_SECONDS}S"
    emails = json.loads(json.dumps(queue))
    emails["Name"] = QUEUE_OF[INVOICE_EMAILS]
    namespace["Queues"].append(emails)
    config_path = tmp_path / "servicebus-config.json"
    config_path.write_text(json.dumps(config))
    fault_token = secrets.token_urlsafe(32)
    servicebus = start_logged(
        ["-m", "servicebus_emulator", "--host", "127.0.0.1", "--port", "0",
         "--config", str(config_path)],
        tmp_path / "servicebus.log",
        reaped_env,
    )  # fmt: skip
    cosmos = start_logged(
        ["-m", "cosmos_emulator", "--host", "127.0.0.1", "--port", "0"],
        tmp_path / "cosmos.log",
        {**reaped_env, "COSMOS_EMULATOR_FAULT_TOKEN": fault_token},
    )
    try:
        ready = wait_for_output(tmp_path / "servicebus.log", SERVICEBUS_READY, servicebus)
        host, port = ready.groups()
        endpoint = wait_for_output(tmp_path / "cosmos.log", COSMOS_READY, cosmos)[1]
        with CosmosClient(endpoint, credential=WELL_KNOWN_KEY) as client:
            database = client.create_database_if_not_exists(DATABASE)
            database.create_container_if_not_exists(
                id=CONTAINER, partition_key=PartitionKey(path="/pk"), default_ttl=-1
            )
        yield Emulators(
            f"Endpoint=sb://{host}:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
            endpoint,
            fault_token,
        )
    finally:
        stop_process(cosmos)
        stop_process(servicebus)


@dataclass
class Workers:
    """The worker processes, 3 per consumer; each started one with a decisions file of its own."""

    emulators: Emulators
    env: dict[str, str]
    folder: Path
    running: dict[str, list[subprocess.Popen[bytes]]] = field(default_factory=dict)
    started: int = 0
    killed: list[str] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)  # pid -> what the worker printed

    @property
    def mail_journal(self) -> Path:
        return self.folder / "mail-journal.jsonl"

    def start(self, consumer: str) -> subprocess.Popen[bytes]:
        self.started += 1
        name = f"{consumer}-{self.started}"
        log = self.folder / f"{name}.log"
        process = start_logged(
            [str(WORKER), consumer,
             "--decisions", str(self.folder / f"{name}.decisions.jsonl"),
             "--mail-journal", str(self.mail_journal)],
            log,
            self.emulators.worker_environment(self.env),
        )  # fmt: skip
        self.logs[process.pid] = log
        self.running.setdefault(consumer, []).append(process)
        return process

    def kill_one(self, consumer: str, rng: random.Random) -> None:
        """SIGKILL a random worker of `consumer` and start another in its place at once."""
        victims = self.running[consumer]
        victim = victims.pop(rng.randrange(len(victims)))
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        self.killed.append(consumer)
        self.start(consumer)

    def check_alive(self) -> None:
        for process in (p for processes in self.running.values() for p in processes):
            assert process.poll() is None, f"a worker exited by itself: {process.args!r}"

    def stop_all(self) -> None:
        """SIGTERM, the graceful stop, once each has said it takes one (the last restarted may
        still be starting); every one must exit 0 (no worker crashed)."""
        everyone = [p for processes in self.running.values() for p in processes]
        for process in everyone:
            wait_for_output(self.logs[process.pid], re.compile(re.escape(READY_LINE)), process)
        for process in everyone:
            process.send_signal(signal.SIGTERM)
        codes = [process.wait(timeout=60) for process in everyone]
        assert codes == [0] * len(everyone), codes

    def decisions(self) -> dict[str, list[dict[str, Any]]]:
        """Consumer -> every decision its workers journaled (every attempt)."""
        found: dict[str, list[dict[str, Any]]] = {INVOICING: [], INVOICE_EMAILS: []}
        for path in self.folder.glob("*.decisions.jsonl"):
            consumer = path.name.rsplit("-", 1)[0]
            found[consumer].extend(json.loads(line) for line in path.read_text().splitlines())
        return found

    def settled(self) -> dict[str, int]:
        """Consumer -> how many of its decisions settled a message (completed or
        dead-lettered it), so far."""
        return {
            consumer: sum(1 for decision in journal if decision["settlement"] != "abandon")
            for consumer, journal in self.decisions().items()
        }

    def kill_when_settled(
        self,
        schedule: tuple[tuple[str, int], ...],
        rng: random.Random,
        counted_from: dict[str, int] | None = None,
    ) -> None:
        """Each (consumer, count) of `schedule`: a random worker of that consumer SIGKILLed as
        soon as the consumer has settled `count` messages (beyond `counted_from`)."""
        since = counted_from or dict.fromkeys(QUEUE_OF, 0)
        pending = list(schedule)

        def fired_all() -> bool:
            settled = self.settled()
            for consumer, count in list(pending):
                if settled[consumer] - since[consumer] >= count:
                    self.kill_one(consumer, rng)
                    pending.remove((consumer, count))
            return not pending

        # Polled often: the invoicing consumer's backlog lasts a second or two.
        poll_until(fired_all, within=90, what=f"the kills {schedule}", workers=self, every=0.05)


def poll_until(
    check: Callable[[], bool], *, within: float, what: str, workers: Workers, every: float = 0.2
) -> None:
    deadline = time.monotonic() + within
    while not check():
        workers.check_alive()
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(every)  # a poll of files and the broker, bounded by the deadline


def send(emulators: Emulators, messages: list[tuple[str, bytes]]) -> None:
    """The same messages, in the same order, to both consumers' queues: the e-mail queue first,
    so that the faster invoicing consumer's backlog is still there when this returns."""
    with ServiceBusClient.from_connection_string(emulators.servicebus_connection) as client:
        for queue in (QUEUE_OF[INVOICE_EMAILS], QUEUE_OF[INVOICING]):
            with client.get_queue_sender(queue) as sender:
                for start in range(0, len(messages), 50):
                    sender.send_messages(
                        [
                            ServiceBusMessage(body, message_id=message_id)
                            for message_id, body in messages[start : start + 50]
                        ]
                    )


def broker_state(emulators: Emulators) -> dict[str, tuple[bool, dict[str, tuple[str, bytes]]]]:
    """Queue -> (whether any message is still active, MessageId -> (reason, body) of each dead
    letter)."""
    state = {}
    with ServiceBusClient.from_connection_string(emulators.servicebus_connection) as client:
        for queue in QUEUE_OF.values():
            with client.get_queue_receiver(queue) as active:
                busy = bool(active.peek_messages(max_message_count=1, sequence_number=1))
            with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
                letters = dlq.peek_messages(max_message_count=100, sequence_number=1)
            state[queue] = (
                busy,
                {
                    str(letter.message_id): (str(letter.dead_letter_reason), b"".join(letter.body))
                    for letter in letters
                },
            )
    return state


def stored_documents(emulators: Emulators) -> list[dict[str, Any]]:
    with CosmosClient(emulators.cosmos_endpoint, credential=WELL_KNOWN_KEY) as client:
        container = client.get_database_client(DATABASE).get_container_client(CONTAINER)
        return list(container.query_items("SELECT * FROM c", enable_cross_partition_query=True))


def test_the_invoice_drill_doubles_nothing_loses_nothing_and_dead_letters_only_the_bad(
    emulators: Emulators, reaped_env: dict[str, str], tmp_path: Path
) -> None:
    rng = random.Random(34)
    invoices = {
        f"inv-{number:03d}": InvoiceIssued(
            invoice_id=f"inv-{number:03d}",
            customer_id=f"customer-{number % 37:02d}",
            amount_cents=1000 + number,
        )
        for number in range(INVOICES)
    }
    body_of = {
        i: invoice(i, issued.customer_id, issued.amount_cents) for i, issued in invoices.items()
    }
    reused = rng.sample(sorted(invoices), REUSES)
    elsewhere = {i: f"elsewhere-{i}" for i in reused}  # partitions no valid invoice names
    reuses = [(i, invoice(i, elsewhere[i], amount_cents=7)) for i in reused]
    resent = set(rng.sample(sorted(invoices), RESENDS))
    # A resend right behind its original, as a producer's retry comes: the two copies often
    # reach one worker's batch and are decided at once, in one process (or in two).
    groups = [[(i, body_of[i])] * (2 if i in resent else 1) for i in invoices if i not in reused]
    groups += [[(i, body_of[i])] for i in resent & set(reused)]
    groups += [[reuse] for reuse in reuses] + [[poison] for poison in POISON.items()]
    rng.shuffle(groups)
    load = [message for group in groups for message in group]

    folder = tmp_path / "workers"
    folder.mkdir()
    workers = Workers(emulators, reaped_env, folder)
    for consumer in QUEUE_OF:
        for _ in range(WORKERS_PER_QUEUE):
            workers.start(consumer)

    # The invoices whose MessageIds are reused go first, each decided by both consumers before
    # its reuse is sent: which body of a MessageId is the valid one is then never a race.
    send(emulators, [(i, body_of[i]) for i in reused])

    def reused_originals_done() -> bool:
        return all(
            {d["message_id"] for d in journal if d["outcome"] == "processed"} >= set(reused)
            for journal in workers.decisions().values()
        )

    poll_until(reused_originals_done, within=60, what="the first invoices", workers=workers)
    # The first half of the load now, the second when the outage begins: both consumers then
    # have messages to decide during it, however far each got with the first.
    send(emulators, load[: len(load) // 2])
    workers.kill_when_settled(KILLS_BEFORE_OUTAGE, rng)
    poll_until(
        lambda: min(workers.settled().values()) >= OUTAGE_WHEN_EACH_SETTLED,
        within=60,
        what="the first half under way",
        workers=workers,
    )
    emulators.cosmos_outage(on=True)
    outage_began = time.monotonic()
    send(emulators, load[len(load) // 2 :])
    for consumer, seconds_into_outage in KILLS_INTO_OUTAGE:
        # The outage and the kills inside it happen at their times on the wall clock: the
        # workers must outlast that time (a wait for time itself, not a synchronisation).
        threading.Event().wait(max(seconds_into_outage - (time.monotonic() - outage_began), 0))
        workers.kill_one(consumer, rng)
    threading.Event().wait(max(OUTAGE_SECONDS - (time.monotonic() - outage_began), 0))
    emulators.cosmos_outage(on=False)
    workers.kill_when_settled(KILLS_AFTER_OUTAGE, rng, counted_from=workers.settled())

    expected_letters = {
        **{i: (DeadLetterReason.REQUEST_HASH_MISMATCH.value, body) for i, body in reuses},
        **{i: (DeadLetterReason.INVALID_MESSAGE.value, body) for i, body in POISON.items()},
    }

    def all_decided() -> bool:
        """Each consumer's journals hold a final decision for every MessageId sent (cheap to
        read, so polled before the broker, whose every look opens four links)."""
        return all(
            {d["message_id"] for d in journal if d["settlement"] != "abandon"}
            >= {*invoices, *expected_letters}
            for journal in workers.decisions().values()
        )

    def all_settled() -> bool:
        return not any(busy for busy, _ in broker_state(emulators).values())

    poll_until(all_decided, within=90, what="every message decided", workers=workers)
    poll_until(all_settled, within=60, what="every message settled", workers=workers)
    state = broker_state(emulators)
    workers.stop_all()

    # Dead letters: every reuse (its own body, naming another customer) as a mismatch, every
    # poison message as invalid, and nothing else: no valid message.
    for queue, (_, letters) in state.items():
        assert letters == expected_letters, queue

    # The store: each invoice and its ledger entry once, in its customer's partition, with its
    # own amount; nothing in any partition a reuse named.
    documents = stored_documents(emulators)
    business = [d for d in documents if d["id"].startswith(("invoice-", "ledger-"))]
    assert Counter(d["id"] for d in business) == Counter(
        f"{kind}-{i}" for i in invoices for kind in ("invoice", "ledger")
    )
    for document in business:
        issued = invoices[document["id"].split("-", 1)[1]]
        assert document["pk"] == issued.customer_id
        assert document.get("amountCents", document.get("debitCents")) == issued.amount_cents
    assert [d for d in documents if d["pk"] in elsewhere.values()] == []

    # The provider: every invoice's key, each call with that invoice's own body (a reuse that
    # reached it would show as a call naming another customer); the provider keeps one mail a key.
    calls = [json.loads(line) for line in workers.mail_journal.read_text().splitlines()]
    assert {call["key"] for call in calls} == {mail_key(i) for i in invoices}
    for call in calls:
        issued = invoices[call["key"].removeprefix("invoice-mail:")]
        assert (call["to"], call["text"]) == (issued.customer_id, mail_text(issued))
    # A key was called again only by an attempt that took its claim over (a kill had left it
    # and its lease had ended): each take-over counts one more attempt on the two-phase record.
    attempts = {
        d["downstreamKey"]: d["attempts"] for d in documents if d.get("type") == RECORD_TYPE
    }
    for key, count in Counter(call["key"] for call in calls).items():
        assert count <= attempts[key], key

    # The decisions: none said `processed` twice for one message (a kill between a decision and
    # its settlement makes the redelivery a `duplicate`); no valid message was dead-lettered.
    decisions = workers.decisions()
    for consumer, journal in decisions.items():
        processed = Counter(d["message_id"] for d in journal if d["outcome"] == "processed")
        assert set(processed) <= set(invoices), consumer
        assert max(processed.values()) == 1, (consumer, processed.most_common(3))
        dead = {d["message_id"] for d in journal if d["settlement"] == "dead_letter"}
        assert dead == set(expected_letters), consumer
        # The outage was felt by both consumers, and waited out in place.
        assert any(d["outcome"] == "transient_failure" for d in journal), consumer
        # The kills bit: messages their victims held came back (a backoff in place never gives
        # a message back, so only a kill makes a redelivery here). The first delivery's count is
        # the lowest seen (0 on our emulator: AMQP counts the earlier attempts).
        first_delivery = min(d["delivery_count"] for d in journal)
        assert any(d["delivery_count"] > first_delivery for d in journal), consumer
        # And the outage spent no deliveries: a message comes back only when a kill takes the
        # worker holding it, so none came back more often than its consumer's workers were
        # killed. (Abandoned at each transient failure instead, the messages held through this
        # outage came back 5 to 8 times.)
        redeliveries = max(d["delivery_count"] for d in journal) - first_delivery
        assert redeliveries <= Counter(workers.killed)[consumer], consumer
        # Nothing was handed back but a transient failure, decided again in place.
        abandoned = {d["outcome"] for d in journal if d["settlement"] == "abandon"}
        assert abandoned <= {"transient_failure", "in_progress_elsewhere"}, consumer
    assert Counter(workers.killed) == {INVOICING: 4, INVOICE_EMAILS: 4}
