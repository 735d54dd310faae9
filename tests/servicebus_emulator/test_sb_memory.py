"""What the emulator keeps is bounded by what it holds, not by what passed through (issue 46).

Messages go through a queue and a topic subscription with the real SDK (an hour's time-to-live,
duplicate detection on, some locks renewed), every one is completed, and then the emulator's
own counts of what it keeps are back where they were: no timer, lock or index entry outlives
its message. Before the fix every message left a time-to-live timer (and its lock timer kept
the whole message until the lock's end) on the broker's heap: 2.4 KB per message in a soak.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiver
from sb_support import queue_entry, subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator, start_in_background
from servicebus_emulator.broker import Broker

QUEUE = "passing"
TOPIC = "passing-events"
SUBSCRIPTION = "all"
MESSAGES = 800  # more than the timer heap's compaction threshold (256) can hide
BATCH = 100
WINDOW_S = 1  # the duplicate-detection window: the history empties one window after the load


def _drain(receiver: ServiceBusReceiver, count: int, renew_every: int) -> None:
    done = 0
    deadline = time.monotonic() + 60
    while done < count:
        assert time.monotonic() < deadline, f"only {done} of {count} messages came back"
        for message in receiver.receive_messages(max_message_count=BATCH, max_wait_time=5):
            if done % renew_every == 0:
                receiver.renew_message_lock(message)
            receiver.complete_message(message)
            done += 1


def _drain_all(receiver: ServiceBusReceiver) -> None:
    """Complete what is left (a resent id may have been accepted again)."""
    while batch := receiver.receive_messages(max_message_count=BATCH, max_wait_time=1):
        for message in batch:
            receiver.complete_message(message)


def _dedup_sizes(kept: dict[str, Any]) -> tuple[int, int]:
    return kept["queue"]["dedup"], kept["topic_dedup"]


def _kept(broker: Broker) -> dict[str, Any]:
    queue = broker.queues[QUEUE]
    subscription = broker.topics[TOPIC].subscriptions[SUBSCRIPTION].queue
    return {
        "timers": len(broker.timers),
        "armed_timers": broker.timers.armed,
        "queue": queue.held(),
        "subscription": subscription.held(),
        "topic_dedup": len(broker.topics[TOPIC].dedup),
    }


@pytest.mark.slow
def test_messages_that_passed_through_leave_nothing_behind() -> None:
    window = f"PT{WINDOW_S}S"
    config = topic_config(
        topic_entry(
            TOPIC,
            subscription_entry(SUBSCRIPTION, LockDuration="PT30S"),
            DuplicateDetectionHistoryTimeWindow=window,
        ),
        queues=(
            queue_entry(
                QUEUE,
                LockDuration="PT30S",
                MaxDeliveryCount=10,
                DuplicateDetectionHistoryTimeWindow=window,
            ),
        ),
    )
    emu: RunningEmulator = start_in_background(config=config)
    try:
        baseline = emu.call(_kept, emu.broker)
        with (
            ServiceBusClient.from_connection_string(emu.connection_string) as client,
            client.get_queue_sender(QUEUE) as queue_sender,
            client.get_topic_sender(TOPIC) as topic_sender,
            client.get_queue_receiver(QUEUE) as queue_receiver,
            client.get_subscription_receiver(TOPIC, SUBSCRIPTION) as topic_receiver,
        ):
            for _ in range(MESSAGES // BATCH):
                for sender in (queue_sender, topic_sender):
                    sender.send_messages(
                        [
                            ServiceBusMessage(b"x" * 512, message_id=str(uuid.uuid4()))
                            for _ in range(BATCH)
                        ]
                    )
                _drain(queue_receiver, BATCH, renew_every=7)
                _drain(topic_receiver, BATCH, renew_every=11)
            # A send prunes the history: resend one id until the window has passed and
            # it is all that is left (copies inside the window are dropped as duplicates).
            deadline = time.monotonic() + 30
            while max(_dedup_sizes(emu.call(_kept, emu.broker))) > 1:
                assert time.monotonic() < deadline, "the history was never pruned"
                queue_sender.send_messages(ServiceBusMessage(b"last", message_id="last"))
                topic_sender.send_messages(ServiceBusMessage(b"last", message_id="last"))
            for receiver in (queue_receiver, topic_receiver):
                _drain_all(receiver)
        kept = emu.call(_kept, emu.broker)
        print(f"before: {baseline}\nafter {2 * MESSAGES + 2} messages: {kept}")
    finally:
        emu.stop()

    assert kept["queue"] == {**baseline["queue"], "dedup": 1}
    assert kept["subscription"] == baseline["subscription"]
    assert kept["topic_dedup"] == 1
    assert kept["armed_timers"] == baseline["armed_timers"]
    # Cancelled timers are compacted away once they are half the heap: bounded, not 2 x 800.
    assert kept["timers"] <= baseline["timers"] + 2 * 256
