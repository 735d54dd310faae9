"""The guide in packages/exactly-once/src/exactly_once/README.md, run as written.

Every ```python block of the README is executed, in order, in one namespace, against our Cosmos
DB emulator; messages travel through our Service Bus emulator and the real SDKs. Each case
ends as the guide's outcome table says: a duplicate is completed with nothing written again, a
conflicting payload and a poison message are dead-lettered with the reasons it names. Two of
the guide's workers ("Run it as a worker") compete for one queue: each message is processed
once, and setting the stop event ends them both.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from azure.cosmos.aio import ContainerProxy, CosmosClient
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver
from core_support import QUEUE, guide_blocks, run_guide, unique
from servers import CosmosServer

from exactly_once import (
    Backoff,
    ConsumerOptions,
    Decision,
    Effects,
    InProgressElsewhereError,
    Outcome,
    exactly_once,
)
from exactly_once.decisions import Settlement
from exactly_once.delayed_retries import original_message_id
from exactly_once.store import fingerprint
from servicebus_emulator import RunningEmulator

REPO = Path(__file__).resolve().parents[2]
CORE_SOURCE = REPO / "packages" / "exactly-once" / "src"
T = TypeVar("T")
# A Service Bus endpoint where nothing listens: the guide's client must not reach it at import.
NOWHERE = (
    "Endpoint=sb://127.0.0.1:9;SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)


def test_the_guide_has_the_blocks_this_test_runs() -> None:
    blocks = guide_blocks()
    assert len(blocks) >= 5
    assert any("service_bus_queue_trigger" in block for block in blocks)
    assert any("@exactly_once(" in block for block in blocks)
    assert any("await run_worker(" in block for block in blocks)
    assert any("/webhooks/payments" in block and "@idempotent(" in block for block in blocks)
    assert any("nightly_totals" in block and "@idempotent(" in block for block in blocks)
    keyed = "\n".join(blocks)
    for option in ("key=from_message(", "key=cloud_event_key", "payload=", "cache="):
        assert option in keyed, option
    assert "effects.adjust(" in keyed and 'partition_key_field="warehouse"' in keyed


@pytest.mark.slow
def test_the_guide_type_checks_as_strictly_as_our_code(tmp_path: Path) -> None:
    """A reader's copy passes `mypy --strict` (the project's settings): the guide's JSON
    literals, callbacks and decorators fit the core's signatures as written."""
    copy = tmp_path / "guide.py"
    copy.write_text("\n\n".join(guide_blocks()))

    # Incremental, in the repository's own cache: `make test` runs `make lint` first, so the
    # core and the Azure SDKs it imports are already checked with the same settings and only the
    # copy (a new file each run) is checked again: 0.6 s instead of 11 s. A change to the core
    # invalidates its cache entries, so the result is what a clean run gives.
    result = subprocess.run(
        [str(Path(sys.executable).with_name("mypy")), str(copy)],
        cwd=REPO,
        env={**os.environ, "MYPYPATH": str(CORE_SOURCE)},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert result.returncode == 0, result.stdout


async def test_importing_the_guide_reaches_no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client is built at import, and the import neither waits on the network nor fails
    on it: nothing listens at the endpoint, and every block still runs."""
    monkeypatch.setenv("COSMOS_ENDPOINT", "http://127.0.0.1:9/")  # discard: nothing answers
    monkeypatch.setenv("COSMOS_KEY", "bm90LWEta2V5")  # base64 of "not-a-key": never sent
    monkeypatch.setenv("ServiceBusConnection", NOWHERE)
    namespace: dict[str, Any] = {"__name__": "guide"}
    started = time.monotonic()
    run_guide(namespace)
    await namespace["cosmos"].close()
    await namespace["servicebus_client"].close()

    assert time.monotonic() - started < 5
    assert "send_greeting" in namespace and "main" in namespace


@pytest.fixture
async def guide(
    python_cosmos: CosmosServer, servicebus: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[dict[str, Any]]:
    """The README's code, run as a module would be, with the environment it reads; its
    container created as the guide creates it."""
    monkeypatch.setenv("COSMOS_ENDPOINT", python_cosmos.endpoint)
    monkeypatch.setenv("COSMOS_KEY", python_cosmos.key)
    monkeypatch.setenv("ServiceBusConnection", servicebus.connection_string)
    namespace: dict[str, Any] = {"__name__": "guide"}
    run_guide(namespace)
    try:
        await namespace["create_container"]()
        await namespace["create_stock_container"]()
        yield namespace
    finally:
        await namespace["cosmos"].close()
        await namespace["servicebus_client"].close()


def greeting(greeting_id: str, user_id: str, text: str) -> dict[str, str]:
    return {"greeting_id": greeting_id, "user_id": user_id, "text": text}


async def send(emulator: RunningEmulator, *messages: ServiceBusMessage) -> None:
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(QUEUE) as sender,
    ):
        await sender.send_messages(list(messages))


async def dead_letters(emulator: RunningEmulator) -> dict[str | None, tuple[str | None, str]]:
    """MessageId -> (reason, body) of every dead-lettered message."""
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver,
    ):
        peeked = await receiver.peek_messages(max_message_count=50)
    return {
        message.message_id: (message.dead_letter_reason, b"".join(message.body).decode())
        for message in peeked
    }


async def active(emulator: RunningEmulator) -> list[str | None]:
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        return [message.message_id for message in await receiver.peek_messages(50)]


async def stored(container: ContainerProxy, partition: str) -> dict[str, dict[str, Any]]:
    """The documents of one partition by id, without the store's own properties."""
    found: dict[str, dict[str, Any]] = {}
    async for item in container.query_items("SELECT * FROM c", partition_key=partition):
        found[item["id"]] = {k: v for k, v in item.items() if not k.startswith("_")}
    return found


async def test_worker_a_duplicate_a_conflict_and_a_poison_message_end_as_the_guide_says(
    guide: dict[str, Any], servicebus: RunningEmulator
) -> None:
    user, greeting_id = unique("user"), unique("greeting")
    first = greeting(greeting_id, user, "hello")
    resent = json.dumps(dict(reversed(first.items())), indent=2)  # same payload, other spelling
    await send(
        servicebus,
        ServiceBusMessage(json.dumps(first), message_id=greeting_id),
        ServiceBusMessage(resent, message_id=greeting_id),
        ServiceBusMessage(json.dumps(greeting(greeting_id, user, "bye")), message_id=greeting_id),
        ServiceBusMessage(b"{not json", message_id="poison-1"),
    )

    async with (
        ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        await guide["work"](receiver)

    assert await active(servicebus) == []  # the new one and its duplicate: completed
    letters = await dead_letters(servicebus)
    assert set(letters) == {greeting_id, "poison-1"}
    reason, body = letters[greeting_id]
    assert reason == "RequestHashMismatch" and json.loads(body)["text"] == "bye"
    assert letters["poison-1"][0] == "InvalidMessage"
    documents = await stored(guide["container"], user)
    assert documents[f"card-{greeting_id}"] == {
        "id": f"card-{greeting_id}",
        "text": "hello",
        "length": 5,
        "pk": user,
    }
    inbox = [d for d in documents.values() if d.get("type") == "exactlyOnceInbox"]
    assert len(inbox) == 1
    assert len(documents) == 2  # the card and its inbox record: once
    # The record expires after the queue's redelivery window and the margin; the card never.
    assert inbox[0]["ttl"] == 30 * 10 + 3600 + 7 * 24 * 3600
    assert "ttl" not in documents[f"card-{greeting_id}"]


async def test_two_competing_workers_process_each_message_once_and_stop_on_the_event(
    guide: dict[str, Any], servicebus: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ServiceBusConnection", servicebus.connection_string)
    user = unique("user")
    ids = [unique("greeting") for _ in range(12)]
    await send(
        servicebus,
        *(ServiceBusMessage(json.dumps(greeting(i, user, f"hi {i}")), message_id=i) for i in ids),
    )
    stop = asyncio.Event()
    workers = [asyncio.create_task(guide["serve"](stop)) for _ in range(2)]

    cards = {f"card-{i}" for i in ids}
    deadline = time.monotonic() + 30
    while not cards <= set(await stored(guide["container"], user)):
        assert time.monotonic() < deadline, "the workers did not process every message in 30 s"
        assert not any(worker.done() for worker in workers), "a worker ended before `stop`"
        await asyncio.sleep(0.1)  # polling the store the workers write, bounded by the deadline
    stop.set()
    stats = await asyncio.wait_for(asyncio.gather(*workers), 30)

    # Each message received once (no redelivery) and completed: the queue is empty.
    assert sum(s.received for s in stats) == len(ids)
    assert sum(s.settled for s in stats) == len(ids)
    assert all(s.settlement_failures == 0 for s in stats)
    assert await active(servicebus) == []
    assert await dead_letters(servicebus) == {}
    documents = await stored(guide["container"], user)
    assert set(documents) - cards == {
        key for key, document in documents.items() if document.get("type") == "exactlyOnceInbox"
    }
    assert len(documents) == 2 * len(ids)  # a card and an inbox record per message: once


async def test_main_closes_the_cosmos_client_and_ends_on_sigterm(
    guide: dict[str, Any], servicebus: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ServiceBusConnection", servicebus.connection_string)
    user, ids = unique("user"), [unique("greeting") for _ in range(3)]
    await send(
        servicebus,
        *(ServiceBusMessage(json.dumps(greeting(i, user, "hi")), message_id=i) for i in ids),
    )
    loop = asyncio.get_running_loop()
    main = asyncio.create_task(guide["main"](asyncio.Event()))
    try:
        deadline = time.monotonic() + 30
        while {f"card-{i}" for i in ids} - set(await cards_of(guide, user)):
            assert time.monotonic() < deadline, "main did not process every message in 30 s"
            assert not main.done(), "main ended before SIGTERM"
            await asyncio.sleep(0.1)  # polling the store main writes, bounded by the deadline
        os.kill(os.getpid(), signal.SIGTERM)  # main's handler sets its stop event
        stats = await asyncio.wait_for(main, 30)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)

    assert (stats.received, stats.settled) == (3, 3)
    with pytest.raises(ValueError, match="already been closed"):
        await guide["container"].read()


async def cards_of(guide: dict[str, Any], user: str) -> dict[str, dict[str, Any]]:
    """A user's documents, read through a client of the test's own (main closes the guide's)."""
    endpoint, key = os.environ["COSMOS_ENDPOINT"], os.environ["COSMOS_KEY"]
    async with CosmosClient(endpoint, credential=key) as client:
        container = client.get_database_client("greetings").get_container_client("cards")
        return await stored(container, user)


async def test_a_message_sent_without_a_message_id_is_new_on_every_resend(
    guide: dict[str, Any], servicebus: RunningEmulator
) -> None:
    """Each copy gets a random MessageId: the resend is not a duplicate; its card
    exists without its own inbox record, and it is dead-lettered as an effect conflict."""
    user, greeting_id = unique("user"), unique("greeting")
    body = json.dumps(greeting(greeting_id, user, "hello"))
    await send(servicebus, ServiceBusMessage(body), ServiceBusMessage(body))

    async with (
        ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        await guide["work"](receiver)

    letters = await dead_letters(servicebus)
    assert [reason for reason, _ in letters.values()] == ["EffectDocumentExists"]
    (random_id,) = letters
    assert random_id is not None and uuid.UUID(random_id)  # a random GUID, not ours
    documents = await stored(guide["container"], user)
    assert len(documents) == 2  # the card and the first copy's inbox record


async def test_a_transient_downstream_failure_is_transient_and_called_again_with_its_key(
    guide: dict[str, Any],
) -> None:
    sent = greeting(unique("greeting"), unique("user"), "sms")
    provider = guide["send_text"]

    async def unreachable(key: str, text: str) -> str:
        raise ConnectionError("the provider is unreachable")

    guide["send_text"] = unreachable
    failed = await decide(guide, "text_user", sent)
    guide["send_text"] = provider
    done = await decide(guide, "text_user", sent)

    # A ConnectionError is transient by default: backed off in place where something renews
    # the lock, handed back (not settled) by a bare `decide`.
    assert (failed.outcome, failed.settlement) == (
        Outcome.TRANSIENT_FAILURE,
        Settlement.ABANDON,
    )
    assert done.outcome is Outcome.PROCESSED
    assert guide["sent_texts"] == {f"texts:{sent['greeting_id']}": "sms"}


class ReceiverBackedActions:
    """Functions' `ServiceBusMessageActions` as the host provides them (synchronous calls that
    settle the message on the broker), carried out here by the SDK receiver that received it."""

    def __init__(self, receiver: ServiceBusReceiver, loop: asyncio.AbstractEventLoop) -> None:
        self._receiver = receiver
        self._loop = loop
        self.calls: list[str] = []

    def _run(self, call: Awaitable[T]) -> T:
        async def run() -> T:
            return await call

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def complete(self, message: ServiceBusReceivedMessage) -> None:
        self.calls.append("complete")
        self._run(self._receiver.complete_message(message))

    def abandon(self, message: ServiceBusReceivedMessage) -> None:
        self.calls.append("abandon")
        self._run(self._receiver.abandon_message(message))

    def deadletter(
        self,
        message: ServiceBusReceivedMessage,
        *,
        deadletter_reason: str,
        deadletter_error_description: str,
    ) -> None:
        self.calls.append(f"deadletter {deadletter_reason}")
        self._run(
            self._receiver.dead_letter_message(
                message, reason=deadletter_reason, error_description=deadletter_error_description
            )
        )


async def test_functions_trigger_settles_through_the_message_actions(
    guide: dict[str, Any], servicebus: RunningEmulator
) -> None:
    user, greeting_id = unique("user"), unique("greeting")
    body = json.dumps(greeting(greeting_id, user, "hi"))
    await send(
        servicebus,
        ServiceBusMessage(body, message_id=greeting_id),
        ServiceBusMessage(body, message_id=greeting_id),
        ServiceBusMessage(json.dumps(greeting(greeting_id, user, "other")), message_id=greeting_id),
        ServiceBusMessage(json.dumps({"greeting_id": 1}), message_id="poison-2"),
    )

    async with (
        ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        actions = ReceiverBackedActions(receiver, asyncio.get_running_loop())
        received: list[ServiceBusReceivedMessage] = []
        while len(received) < 4:
            received += await receiver.receive_messages(max_message_count=4, max_wait_time=5)
        for message in received:
            await guide["greetings"](received_message=message, message_actions=actions)

    assert actions.calls == [
        "complete",
        "complete",
        "deadletter RequestHashMismatch",
        "deadletter InvalidMessage",
    ]
    assert await active(servicebus) == []
    assert set(await dead_letters(servicebus)) == {greeting_id, "poison-2"}
    assert f"card-{greeting_id}" in await stored(guide["container"], user)


async def test_a_failure_in_the_trigger_comes_back_later_as_a_scheduled_copy(
    guide: dict[str, Any], servicebus: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trigger as the guide writes it, its effect's downstream down and no in-place budget:
    the host is told to complete the message only once its copy is scheduled on the queue."""

    async def downstream_down(greeting: Any, effects: Effects) -> Outcome:
        raise ConnectionError("the provider is unreachable")

    failing = exactly_once(
        consumer="greetings",
        parse=guide["parse_greeting"],
        store=guide["store"],
        options=ConsumerOptions(backoff=Backoff(budget_seconds=0)),
    )(downstream_down)
    monkeypatch.setitem(guide, "send_greeting", failing)
    greeting_id = unique("greeting")
    await send(
        servicebus,
        ServiceBusMessage(
            json.dumps(greeting(greeting_id, unique("user"), "hi")), message_id=greeting_id
        ),
    )
    async with (
        ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        actions = ReceiverBackedActions(receiver, asyncio.get_running_loop())
        [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
        asked = datetime.datetime.now(datetime.UTC)
        await guide["greetings"](received_message=message, message_actions=actions)
        [copy] = await receiver.peek_messages(max_message_count=10, sequence_number=1)

    assert actions.calls == ["complete"]
    assert copy.message_id != greeting_id and original_message_id(copy) == greeting_id
    assert copy.scheduled_enqueue_time_utc is not None
    # The first delayed retry, a minute on (the default), not redelivered at once.
    waited = (copy.scheduled_enqueue_time_utc - asked).total_seconds()
    assert 55 <= waited <= 65, waited
    assert await dead_letters(servicebus) == {}


async def decide(guide: dict[str, Any], consumer: str, body: dict[str, str]) -> Decision:
    decision: Decision = await guide[consumer].decide(
        json.dumps(body).encode(), body["greeting_id"]
    )
    return decision


async def test_the_business_entity_as_marker(guide: dict[str, Any]) -> None:
    user = unique("user")
    first = greeting(unique("greeting"), user, "welcome")

    assert (await decide(guide, "open_account", first)).outcome is Outcome.PROCESSED
    assert await decide(guide, "open_account", first) == Decision.duplicate()
    other = await decide(guide, "open_account", greeting(first["greeting_id"], user, "changed"))

    assert other.settlement is Settlement.DEAD_LETTER
    assert other.dead_letter_reason == "RequestHashMismatch"
    documents = await stored(guide["container"], user)
    assert set(documents) == {f"account-{user}", f"audit-{first['greeting_id']}"}
    assert documents[f"account-{user}"]["welcome"] == "welcome"


async def test_two_phases_call_the_downstream_once_and_record_a_refusal(
    guide: dict[str, Any],
) -> None:
    user = unique("user")
    sent = greeting(unique("greeting"), user, "sms")

    assert (await decide(guide, "text_user", sent)).outcome is Outcome.PROCESSED
    assert await decide(guide, "text_user", sent) == Decision.duplicate()
    assert guide["sent_texts"] == {f"texts:{sent['greeting_id']}": "sms"}

    empty = greeting(unique("greeting"), user, "")
    for _ in range(2):  # refused for good: the redelivery is dead-lettered from the record
        refused = await decide(guide, "text_user", empty)
        assert refused.settlement is Settlement.DEAD_LETTER
        assert refused.dead_letter_reason == "DownstreamRefused"
    assert len(guide["sent_texts"]) == 1


async def test_a_versioned_update_applies_newer_versions_only(guide: dict[str, Any]) -> None:
    user = unique("user")

    def version(number: int, text: str) -> dict[str, str]:
        return greeting(f"greeting-{uuid.uuid4().hex[:6]}-{number}", user, text)

    assert (await decide(guide, "update_profile", version(2, "two"))).outcome is Outcome.PROCESSED
    assert (await decide(guide, "update_profile", version(1, "one"))).outcome is Outcome.STALE
    assert (await decide(guide, "update_profile", version(2, "dup"))).outcome is Outcome.STALE
    assert (await decide(guide, "update_profile", version(3, "three"))).outcome is (
        Outcome.PROCESSED
    )
    profile = (await stored(guide["container"], user))[f"profile-{user}"]
    assert (profile["motto"], profile["version"]) == ("three", 3)


async def test_the_fastapi_dependency_replays_marked_and_refuses_with_problems(
    guide: dict[str, Any],
) -> None:
    body = greeting(unique("greeting"), unique("user"), "hi")
    key = {"Idempotency-Key": unique("key")}
    transport = httpx.ASGITransport(app=guide["api"])
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        first = await http.post("/greetings", json=body, headers=key)
        again = await http.post("/greetings", json=body, headers=key)
        other = await http.post("/greetings", json={**body, "text": "x"}, headers=key)
        missing = await http.post("/greetings", json=body)

    assert (first.status_code, first.json()) == (201, {"accepted": body["greeting_id"]})
    assert (again.status_code, again.json()) == (201, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    for refused, status, slug in [
        (other, 422, "idempotency-key-reused"),
        (missing, 400, "missing-idempotency-key"),
    ]:
        assert refused.headers["content-type"] == "application/problem+json"
        problem = refused.json()
        assert (problem["status"], problem["type"]) == (status, f"urn:exactly-once:problem:{slug}")
        assert refused.status_code == status and problem["title"] and problem["detail"]


async def test_each_message_is_one_outcome_line_in_the_consumers_log(
    guide: dict[str, Any], servicebus: RunningEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """The guide's consumer as a user runs it: a new message, its duplicate, its MessageId
    reused with another body and a poison one each leave one `key=value` line on
    `exactly_once.outcomes` (INFO when completed, WARNING when dead-lettered), naming the
    consumer, the MessageId, the outcome, the reason and the time it took."""
    user, greeting_id = unique("user"), unique("greeting")
    body = json.dumps(greeting(greeting_id, user, "hello"))
    hostile_id = 'poison "3"\nconsumer=forged'  # the producer's bytes, escaped in the line
    await send(
        servicebus,
        ServiceBusMessage(body, message_id=greeting_id),
        ServiceBusMessage(body, message_id=greeting_id),
        ServiceBusMessage(json.dumps(greeting(greeting_id, user, "bye")), message_id=greeting_id),
        ServiceBusMessage(b"{not json", message_id=hostile_id),
    )

    with caplog.at_level(logging.INFO, logger="exactly_once.outcomes"):
        async with (
            ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
            client.get_queue_receiver(QUEUE) as receiver,
        ):
            await guide["work"](receiver)

    lines = [r for r in caplog.records if r.name == "exactly_once.outcomes"]
    assert [r.getMessage().split(" duration_ms=")[0] for r in lines] == [
        f"consumer=greetings key={greeting_id} outcome=processed settlement=complete",
        f"consumer=greetings key={greeting_id} outcome=duplicate settlement=complete",
        f"consumer=greetings key={greeting_id} outcome=mismatch settlement=dead_letter"
        " reason=RequestHashMismatch",
        'consumer=greetings key="poison \\"3\\"\\nconsumer=forged" outcome=rejected'
        " settlement=dead_letter reason=InvalidMessage",
    ]
    assert [r.levelno for r in lines] == [logging.INFO] * 2 + [logging.WARNING] * 2
    assert all("\n" not in r.getMessage() for r in lines)
    for record in lines:
        duration = float(record.getMessage().split(" duration_ms=")[1].split(" ")[0])
        assert 0 <= duration < 30_000 and record.__dict__["duration_ms"] == duration
    # The same fields as the record's attributes, for a structured handler: the key unescaped.
    poison = lines[3].__dict__
    assert (poison["key"], poison["reason"]) == (hostile_id, "InvalidMessage")
    assert "detail=" in lines[3].getMessage() and "JSON" in poison["detail"]


async def test_the_outcome_lines_turn_down_to_the_messages_someone_should_look_at(
    guide: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """At WARNING (the logger's level set by the user) only the dead letters remain."""
    sent = greeting(unique("greeting"), unique("user"), "hi")
    with caplog.at_level(logging.WARNING, logger="exactly_once.outcomes"):
        await decide(guide, "send_greeting", sent)
        await guide["send_greeting"].decide(b"{not json", "poison-4")

    assert [r.getMessage().split(" ")[:3] for r in caplog.records] == [
        ["consumer=greetings", "key=poison-4", "outcome=rejected"]
    ]


async def test_a_redelivered_webhook_credits_once_and_a_reused_event_id_is_refused(
    guide: dict[str, Any],
) -> None:
    account, event_id = unique("account"), unique("evt")
    event = {"id": event_id, "account": account, "amount": 100}
    transport = httpx.ASGITransport(app=guide["api"])
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        first = await http.post("/webhooks/payments", json=event)
        redelivered = await http.post("/webhooks/payments", json={**event, "delivery_attempt": 2})
        reused = await http.post("/webhooks/payments", json={**event, "amount": 999})
        other = await http.post(
            "/webhooks/payments", json={**event, "id": unique("evt"), "amount": 50}
        )

    assert (first.status_code, first.json()) == (200, {"event_id": event_id, "balance": 100})
    assert (redelivered.status_code, redelivered.json()) == (200, first.json())
    assert reused.status_code == 422
    assert other.json()["balance"] == 150
    assert guide["balances"][account] == 150  # credited once per event


async def test_an_overlapping_nightly_run_is_refused_and_a_rerun_replays(
    guide: dict[str, Any],
) -> None:
    day = datetime.date(2026, 12, 3) - datetime.timedelta(days=uuid.uuid4().int % 3000)
    runs: list[datetime.date] = []
    started, finish = asyncio.Event(), asyncio.Event()
    failures = [RuntimeError("the warehouse is down")]

    async def held_count(counted: datetime.date) -> int:
        runs.append(counted)
        if failures:
            raise failures.pop()
        started.set()
        await finish.wait()
        return 7

    guide["count_orders"] = held_count  # the job's work, held while a second run starts
    with pytest.raises(RuntimeError, match="warehouse"):
        await guide["nightly_totals"](day)  # a failed run releases the day
    first = asyncio.create_task(guide["nightly_totals"](day))
    await asyncio.wait_for(started.wait(), 10)

    with pytest.raises(InProgressElsewhereError):
        await guide["nightly_totals"](day)
    finish.set()
    done = await asyncio.wait_for(first, 10)
    rerun = await guide["nightly_totals"](day)

    assert done == rerun == guide["NightlyTotals"](day, 7)
    assert isinstance(rerun, guide["NightlyTotals"]) and isinstance(rerun.day, datetime.date)
    assert runs == [day, day]  # the failed run and the first: the overlap and rerun ran nothing


def invoice(invoice_id: str, customer_id: str, cents: int, sent_at: str) -> bytes:
    body = {
        "invoice_id": invoice_id,
        "customer_id": customer_id,
        "amount_cents": cents,
        "sent_at": sent_at,
    }
    return json.dumps(body).encode()


async def test_the_invoice_key_and_projection_make_a_later_resend_a_duplicate(
    guide: dict[str, Any],
) -> None:
    """Keys, payloads and a cache: the invoice id is the key and the time it was sent is
    outside the payload, so a resend under another MessageId a minute later is a duplicate;
    another amount is a mismatch; an invoice without an id is dead-lettered for it."""
    record_invoice = guide["record_invoice"]
    invoice_id, customer = unique("invoice"), unique("customer")
    first = invoice(invoice_id, customer, 1200, "2026-12-04T18:00:00Z")
    resent = invoice(invoice_id, customer, 1200, "2026-12-04T18:01:00Z")
    changed = invoice(invoice_id, customer, 1300, "2026-12-04T18:02:00Z")

    decisions = [
        await record_invoice.decide(body, unique("m")) for body in (first, resent, resent, changed)
    ]
    keyless = await record_invoice.decide(invoice("", customer, 1, "2026-12-04T18:00:00Z"), "m")

    assert [d.outcome for d in decisions] == [
        Outcome.PROCESSED,
        Outcome.DUPLICATE,
        Outcome.DUPLICATE,
        Outcome.MISMATCH,
    ]
    assert decisions[3].dead_letter_reason == "RequestHashMismatch"
    assert keyless.dead_letter_reason == "MissingIdempotencyKey"
    assert guide["invoice_cache"].completed("invoices", invoice_id, record_invoice_hash(first))
    documents = await stored(guide["container"], customer)
    assert documents[f"invoice-{invoice_id}"]["cents"] == 1200


def record_invoice_hash(body: bytes) -> str:
    """The request hash the guide's projection gives: the invoice without `sent_at`."""
    invoice = json.loads(body)
    del invoice["sent_at"]
    return fingerprint(invoice)


async def test_a_cloud_event_in_structured_and_binary_mode_is_one_event(
    guide: dict[str, Any], servicebus: RunningEmulator
) -> None:
    source, event_id, user = "/signups", unique("event"), unique("user")
    structured = ServiceBusMessage(
        json.dumps(
            {
                "specversion": "1.0",
                "type": "com.example.signup",
                "source": source,
                "id": event_id,
                "data": {"user_id": user},
            }
        ),
        content_type="application/cloudevents+json; charset=utf-8",
    )
    await send(servicebus, structured, guide["binary_signup"](source, event_id, user))

    async with (
        ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        received: list[ServiceBusReceivedMessage] = []
        while len(received) < 2:
            batch = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
            assert batch, "the two events did not arrive"
            received += batch
        decisions = [await guide["welcome"].with_receiver(m, receiver) for m in received]

    # Each copy has a MessageId of its own (the SDK's random one): the event's key decides.
    assert received[0].message_id != received[1].message_id
    assert [d.outcome for d in decisions] == [Outcome.PROCESSED, Outcome.DUPLICATE]
    assert await active(servicebus) == []
    assert set(await stored(guide["container"], user)) >= {f"welcome-{user}"}


async def test_the_outbox_relay_sends_each_entry_and_releases_its_lease_when_stopped(
    guide: dict[str, Any], servicebus: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ServiceBusConnection", servicebus.connection_string)
    await guide["create_outbox_containers"]()
    entry_id, user = unique("entry"), unique("user")
    await guide["outbox"].create_item(
        {"id": entry_id, "pk": user, "greeting": greeting(entry_id, user, "hi")}
    )
    stop = asyncio.Event()
    relaying = asyncio.create_task(guide["relay"](stop))

    deadline = time.monotonic() + 30
    while entry_id not in await active(servicebus):
        assert time.monotonic() < deadline, "the outbox entry was not relayed within 30 s"
        assert not relaying.done(), relaying
        await asyncio.sleep(0.1)  # polling the queue, bounded by the deadline
    stop.set()
    await relaying

    leases = [item async for item in guide["outbox_leases"].query_items("SELECT * FROM c")]
    assert leases, "a lease per feed range"
    assert all(lease["owner"] is None and lease["continuation"] for lease in leases)


# --- "Apply an amount once: adjust" --------------------------------------------------------


async def stock_levels(guide: dict[str, Any], warehouse: str, **levels: int) -> None:
    """Items of one warehouse, written as the guide's container holds them (by /warehouse)."""
    for item_id, available in levels.items():
        item = {"id": item_id, "warehouse": warehouse, "available": available}
        await guide["stock"].create_item(item)


async def decide_together(servicebus: RunningEmulator, consumer: Any, count: int) -> list[Decision]:
    """Receive `count` messages and decide them all at once (copies beside each other)."""
    async with (
        ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        received: list[ServiceBusReceivedMessage] = []
        while len(received) < count:
            batch = await receiver.receive_messages(max_message_count=count, max_wait_time=5)
            assert batch, f"{count - len(received)} messages did not arrive"
            received += batch
        return list(await asyncio.gather(*(consumer.with_receiver(m, receiver) for m in received)))


def event(guide: dict[str, Any], source: str, event_id: str, data: Any, message_id: str) -> Any:
    message = guide["binary_event"](source, event_id, data)
    message.message_id = message_id
    return message


async def test_a_reservation_takes_stock_once_and_a_refusal_writes_nothing(
    guide: dict[str, Any], servicebus: RunningEmulator
) -> None:
    """The store on /warehouse (`partition_key_field`), a CloudEvents key holding `/`."""
    warehouse = unique("eu-west")
    source = f"/warehouse/{warehouse}"
    await stock_levels(guide, warehouse, a=5, b=2, c=1)
    untouched = await guide["stock"].read_item("c", partition_key=warehouse)
    reservation = guide["Reservation"]
    fits = reservation(warehouse=warehouse, lines={"a": 3, "b": 2})
    short = reservation(warehouse=warehouse, lines={"c": 1, "a": 9})
    await send(
        servicebus,
        event(guide, source, "e1", fits, "copy-1"),
        event(guide, source, "e1", fits, "copy-2"),
        event(guide, source, "e2", short, "short"),
    )

    decided = await decide_together(servicebus, guide["reserve_stock"], 3)
    reused = reservation(warehouse=warehouse, lines={"a": 1})
    await send(servicebus, event(guide, source, "e1", reused, "reused"))
    [mismatch] = await decide_together(servicebus, guide["reserve_stock"], 1)

    assert sorted(str(d.outcome) for d in decided) == ["duplicate", "processed", "refused"]
    assert mismatch.outcome == "mismatch"
    letters = await dead_letters(servicebus)
    assert {m: reason for m, (reason, _) in letters.items()} == {
        "short": "OutOfStock",
        "reused": "RequestHashMismatch",
    }
    documents = await stored(guide["stock"], warehouse)
    assert {i: documents[i]["available"] for i in "abc"} == {"a": 2, "b": 0, "c": 1}
    after = await guide["stock"].read_item("c", partition_key=warehouse)
    assert after["_etag"] == untouched["_etag"]  # the refusal wrote nothing to the items
    markers = [d for d in documents.values() if d.get("type") == "exactlyOnceAdjustment"]
    assert sorted("refused" in m for m in markers) == [False, True]
    assert all("/" not in m["id"] and m["key"].startswith('["/warehouse/') for m in markers)


async def test_a_shipment_refused_in_one_warehouse_gives_the_others_back(
    guide: dict[str, Any], servicebus: RunningEmulator
) -> None:
    north, south = unique("north"), unique("south")
    await stock_levels(guide, north, a=5)
    await stock_levels(guide, south, b=1)
    shipment = guide["Shipment"](picks={north: {"a": 2}, south: {"b": 1}})

    await send(servicebus, event(guide, "/shipments", "s1", shipment, "s1"))
    [first] = await decide_together(servicebus, guide["reserve_shipment"], 1)
    await send(servicebus, event(guide, "/shipments", "s2", shipment, "s2"))
    [second] = await decide_together(servicebus, guide["reserve_shipment"], 1)
    await send(servicebus, event(guide, "/shipments", "s2", shipment, "s2-again"))
    [again] = await decide_together(servicebus, guide["reserve_shipment"], 1)

    assert first.outcome == Outcome.PROCESSED
    assert (second.outcome, second.dead_letter_reason) == ("refused", "OutOfStock")
    assert (again.outcome, again.dead_letter_reason) == ("refused", "OutOfStock")
    north_items, south_items = (
        await stored(guide["stock"], north),
        await stored(guide["stock"], south),
    )
    assert (north_items["a"]["available"], south_items["b"]["available"]) == (3, 0)
