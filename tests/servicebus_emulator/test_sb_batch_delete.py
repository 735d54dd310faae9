"""`com.microsoft:batch-delete-messages` on queues, subscriptions and dead-letter queues.

azure-servicebus 7.15 has no `delete_messages` / `purge_messages` (7.13.0b1 had them), so the
request goes over the SDK's own management link, built with the SDK's own AMQP codec, as the
.NET and JavaScript SDKs send it: `message-count` (int), `enqueued-time-utc` (timestamp),
optionally `session-id`; the reply's `message-count` is how many were deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiver,
    ServiceBusSubQueue,
)
from sb_support import queue_entry, subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator

BATCH_DELETE = b"com.microsoft:batch-delete-messages"


def _reply(status: int, message: Any, description: Any, amqp_transport: Any) -> dict[str, Any]:
    properties = message.application_properties or {}
    return {
        "status": status,
        "deleted": (message.value or {}).get(b"message-count", 0) if status == 200 else 0,
        "condition": properties.get(b"errorCondition"),
    }


def batch_delete(
    receiver: ServiceBusReceiver,
    count: int,
    before_ms: int | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    transport = receiver._amqp_transport  # the SDK's own codec and management link
    body: dict[str, Any] = {
        "message-count": transport.AMQP_INT_VALUE(count),
        "enqueued-time-utc": transport.AMQP_TIMESTAMP_VALUE(
            before_ms if before_ms is not None else int(time.time() * 1000) + 60_000
        ),
    }
    if session_id is not None:
        body["session-id"] = session_id
    receiver._open()
    reply: dict[str, Any] = receiver._mgmt_request_response_with_retry(BATCH_DELETE, body, _reply)
    return reply


def _ms(moment: datetime | None) -> int:
    assert moment is not None
    return int(moment.timestamp() * 1000)


def test_deletes_oldest_unlocked_messages_and_keeps_locked_and_scheduled_ones(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, LockDuration="PT30S")
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(5)])
            sender.schedule_messages(
                ServiceBusMessage("later"), datetime.now(UTC) + timedelta(hours=1)
            )
        with client.get_queue_receiver(queue_name) as receiver:
            (locked,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            deferred = receiver.receive_messages(max_message_count=1, max_wait_time=5)[0]
            receiver.defer_message(deferred)
            reply = batch_delete(receiver, 10)
            assert reply == {"status": 200, "deleted": 4, "condition": None}
            left = receiver.peek_messages(10, sequence_number=1)
            assert sorted(str(m) for m in left) == ["later", str(locked)]
            receiver.complete_message(locked)  # the locked message was left whole
            assert batch_delete(receiver, 10)["status"] == 204


def test_the_enqueued_time_cutoff_and_the_per_request_limits(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name)
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(queue_name) as sender,
        client.get_queue_receiver(queue_name) as receiver,
    ):
        sender.send_messages([ServiceBusMessage("old-1"), ServiceBusMessage("old-2")])
        newest_old = _ms(receiver.peek_messages(2, sequence_number=1)[-1].enqueued_time_utc)
        deadline = time.monotonic() + 5
        while time.time() * 1000 <= newest_old + 1 and time.monotonic() < deadline:
            pass  # the next sends must fall in a later millisecond than the cutoff
        batch = sender.create_message_batch()
        for i in range(600):
            batch.add_message(ServiceBusMessage(f"new-{i}"))
        sender.send_messages(batch)
        reply = batch_delete(receiver, 4000, before_ms=newest_old + 1)
        assert reply["deleted"] == 2
        assert str(receiver.peek_messages(1, sequence_number=1)[0]) == "new-0"
        # Standard deletes at most 500 per request; the SDKs' purge loops until none is left.
        assert [batch_delete(receiver, 4000)["deleted"] for _ in range(3)] == [500, 100, 0]
        for bad in (0, 4001):
            refused = batch_delete(receiver, bad)
            assert (refused["status"], refused["condition"]) == (
                400,
                b"com.microsoft:argument-error",
            )


def test_subscriptions_dead_letter_queues_and_single_sessions(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    emulator = make_config_emulator(
        topic_config(
            topic_entry("events", subscription_entry("all")),
            queues=(queue_entry("sessions", RequiresSession=True),),
        )
    )
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages([ServiceBusMessage(f"e{i}") for i in range(3)])
        with client.get_subscription_receiver("events", "all") as receiver:
            (first,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.dead_letter_message(first, reason="bad")
            assert batch_delete(receiver, 100)["deleted"] == 2
        with client.get_subscription_receiver(
            "events", "all", sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dead_letters:
            assert batch_delete(dead_letters, 100)["deleted"] == 1
            assert dead_letters.peek_messages(1, sequence_number=1) == []
        with client.get_queue_sender("sessions") as sender:
            sender.send_messages([ServiceBusMessage("m", session_id=s) for s in "aabb"])
        with client.get_queue_receiver("sessions", session_id="a") as receiver:
            assert batch_delete(receiver, 100, session_id="a")["deleted"] == 2
        with client.get_queue_receiver("sessions", session_id="b") as receiver:
            assert len(receiver.peek_messages(10, sequence_number=1)) == 2


def test_a_request_naming_no_count_is_refused(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name)
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(queue_name) as receiver,
    ):
        receiver._open()
        reply = receiver._mgmt_request_response_with_retry(BATCH_DELETE, {}, _reply)
    assert (reply["status"], reply["condition"]) == (400, b"com.microsoft:argument-error")
