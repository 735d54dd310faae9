"""Sessions (`RequiresSession: true`) through the sync SDK: session receivers by id and next
available, one lock holder per session, FIFO within a session, session lock renewal and expiry,
session state, and the refusals Service Bus makes on session entities."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiver,
)
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)
from sb_support import queue_entry, subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator, start_in_background

QUEUE = "sq"  # locks last 30 s
SHORT = "sq-short"  # locks last SHORT_LOCK_S seconds (expiry and renewal)
TOPIC = "st"
SHORT_LOCK_S = 1.5


@pytest.fixture(scope="module")
def session_emulator() -> Iterator[RunningEmulator]:
    """A session queue and a plain queue; a topic with a session and a plain subscription."""
    lock = "PT30S"
    config = topic_config(
        topic_entry(
            TOPIC,
            subscription_entry("sessions", RequiresSession=True, LockDuration=lock),
            subscription_entry("plain"),
        ),
        queues=(
            queue_entry(QUEUE, RequiresSession=True, LockDuration=lock),
            queue_entry(SHORT, RequiresSession=True, LockDuration=f"PT{SHORT_LOCK_S}S"),
        ),
    )
    with start_in_background(config=config) as emu:
        yield emu


@pytest.fixture
def client(session_emulator: RunningEmulator) -> Iterator[ServiceBusClient]:
    with ServiceBusClient.from_connection_string(
        session_emulator.connection_string, retry_total=0
    ) as sb:
        yield sb
    # Each test leaves the shared queue empty: drain whatever a failed test left.
    session_emulator.call(_clear(session_emulator))


def _clear(emu: RunningEmulator) -> Callable[[], None]:
    def clear() -> None:
        broker = emu.broker
        for queue in [*broker.queues.values(), *broker._subscriptions.values()]:
            for msg in list(queue.messages.values()):
                queue._remove(msg)
            if queue.sessions is not None:
                for session in list(queue.sessions.values()):
                    queue._end_session_lock(session)
                queue.sessions.clear()

    return clear


def receive(
    receiver: ServiceBusReceiver, count: int, wait: float = 5
) -> list[ServiceBusReceivedMessage]:
    got: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + wait
    while len(got) < count and time.monotonic() < deadline:
        got += receiver.receive_messages(max_message_count=count - len(got), max_wait_time=1)
    return got


def open_receiver(receiver: ServiceBusReceiver) -> None:
    """Open a receiver (its attach), receive once, close it."""
    with receiver:
        receiver.receive_messages(max_message_count=1, max_wait_time=1)


def send(
    client: ServiceBusClient, *pairs: tuple[str, str], topic: bool = False, queue: str = QUEUE
) -> None:
    sender = client.get_topic_sender(TOPIC) if topic else client.get_queue_sender(queue)
    with sender:
        sender.send_messages([ServiceBusMessage(body, session_id=sid) for sid, body in pairs])


def test_a_session_receiver_gets_its_session_in_order(client: ServiceBusClient) -> None:
    send(client, ("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2"), ("a", "a3"))
    with client.get_queue_receiver(QUEUE, session_id="a") as receiver:
        got = receive(receiver, 3)
        assert [str(m) for m in got] == ["a1", "a2", "a3"]
        assert {m.session_id for m in got} == {"a"}
        assert receiver.session.session_id == "a"
        # An abandoned message comes back to the same session receiver, still first.
        receiver.abandon_message(got[0])
        again = receive(receiver, 1)
        assert [str(m) for m in again] == ["a1"] and again[0].delivery_count == 1
        for msg in [again[0], *got[1:]]:
            receiver.complete_message(msg)
        # Completed means gone from the session: a peek sees locked messages too, at once.
        assert receiver.peek_messages(max_message_count=1, sequence_number=1) == []
    with client.get_queue_receiver(QUEUE, session_id="b") as receiver:
        got = receive(receiver, 2)
        assert [str(m) for m in got] == ["b1", "b2"]
        for msg in got:
            receiver.complete_message(msg)


def test_next_available_session_and_one_lock_holder(client: ServiceBusClient) -> None:
    send(client, ("s1", "x1"), ("s2", "y1"))
    with client.get_queue_receiver(QUEUE, session_id=NEXT_AVAILABLE_SESSION) as first:
        assert first.session.session_id == "s1"  # the session whose next message is oldest
        assert first.session.locked_until_utc is not None
        with pytest.raises(SessionCannotBeLockedError):
            open_receiver(client.get_queue_receiver(QUEUE, session_id="s1"))
        with client.get_queue_receiver(
            QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2
        ) as other:
            assert other.session.session_id == "s2"
            (msg,) = receive(other, 1)
            assert str(msg) == "y1"
            other.complete_message(msg)
        # Every session with messages is locked: a next-available receiver times out.
        with pytest.raises(OperationTimeoutError):
            open_receiver(
                client.get_queue_receiver(QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1)
            )
        (msg,) = receive(first, 1)
        assert str(msg) == "x1"
        first.complete_message(msg)
    # Closing the receiver released the session: another receiver locks it at once.
    with client.get_queue_receiver(QUEUE, session_id="s1") as again:
        assert again.session.session_id == "s1"
        assert again.peek_messages(max_message_count=1, sequence_number=1) == []  # x1 completed


def test_a_next_available_receiver_waits_for_a_session(
    client: ServiceBusClient, session_emulator: RunningEmulator
) -> None:
    queue = session_emulator.broker.resolve(QUEUE)
    assert queue is not None
    opened: list[str | None] = []
    errors: list[BaseException] = []

    def open_next_available() -> None:
        try:
            with client.get_queue_receiver(
                QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=10
            ) as receiver:
                opened.append(receiver.session.session_id)
                got = receive(receiver, 1)
                opened.extend(str(m) for m in got)
                for m in got:
                    receiver.complete_message(m)
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    thread = threading.Thread(target=open_next_available)
    thread.start()
    deadline = time.monotonic() + 5
    while not session_emulator.call(lambda: len(queue._session_waiters)):
        assert time.monotonic() < deadline, "the receiver's attach never arrived"
        time.sleep(0.02)
    assert opened == []  # its attach is not answered while no session has a message
    send(client, ("late", "hello"))
    thread.join(15)
    assert not errors, errors
    assert opened == ["late", "hello"]


def test_session_state_get_and_set(
    client: ServiceBusClient, session_emulator: RunningEmulator
) -> None:
    queue = session_emulator.broker.resolve(QUEUE)
    assert queue is not None and queue.sessions is not None
    sessions = queue.sessions
    with client.get_queue_receiver(QUEUE, session_id="state") as receiver:
        assert receiver.session.get_state() is None
        receiver.session.set_state("step-1")
        assert receiver.session.get_state() == b"step-1"
        receiver.session.set_state(b"\x00\xffbinary")
        assert receiver.session.get_state() == b"\x00\xffbinary"
    # The state outlives the lock: the next receiver of the session reads it, then clears it.
    with client.get_queue_receiver(QUEUE, session_id="state") as receiver:
        assert receiver.session.get_state() == b"\x00\xffbinary"
        receiver.session.set_state(None)
        assert receiver.session.get_state() is None
    # Unlocked, without messages or state: the emulator forgets the session (ids are the
    # clients' choice, so it must not keep every one it ever saw).
    deadline = time.monotonic() + 5
    while session_emulator.call(lambda: "state" in sessions):
        assert time.monotonic() < deadline, "the empty session was never forgotten"
        time.sleep(0.02)


def test_session_lock_renewal_keeps_the_session(client: ServiceBusClient) -> None:
    send(client, ("r", "r1"), queue=SHORT)
    with client.get_queue_receiver(SHORT, session_id="r") as receiver:
        (msg,) = receive(receiver, 1)
        before = receiver.session.locked_until_utc
        assert before is not None
        end = time.monotonic() + SHORT_LOCK_S * 2
        while time.monotonic() < end:  # renew for longer than one lock lasts
            time.sleep(SHORT_LOCK_S / 3)
            renewed = receiver.session.renew_lock()
        assert renewed > before
        with pytest.raises(SessionCannotBeLockedError):
            open_receiver(client.get_queue_receiver(SHORT, session_id="r"))
        receiver.complete_message(msg)  # the message's lock lasted as long as its session's


def test_an_expired_session_lock_frees_the_session_and_its_messages(
    client: ServiceBusClient,
) -> None:
    send(client, ("e", "e1"), ("e", "e2"), queue=SHORT)
    receiver = client.get_queue_receiver(SHORT, session_id="e", prefetch_count=0)
    with receiver:
        (msg,) = receive(receiver, 1)
        assert str(msg) == "e1"
        # Not renewed: once the lock expires another receiver can lock the session and gets
        # the unsettled message again, its delivery count raised.
        deadline = time.monotonic() + SHORT_LOCK_S * 4
        while True:
            try:
                other = client.get_queue_receiver(SHORT, session_id="e")
                other.__enter__()
                break
            except SessionCannotBeLockedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with other:
            got = receive(other, 2)
            assert [(str(m), m.delivery_count) for m in got] == [("e1", 1), ("e2", 0)]
            for m in got:
                other.complete_message(m)
        # Hide the SDK's own expiry check so the emulator's answer is what is tested.
        receiver.session._locked_until_utc = None  # type: ignore[assignment]
        with pytest.raises(SessionLockLostError, match="Accept a new MessageSession"):
            receiver.session.get_state()
        with pytest.raises(SessionLockLostError):
            receiver.complete_message(msg)


def test_session_entities_refuse_messages_without_session_id_and_plain_receivers(
    client: ServiceBusClient,
) -> None:
    with client.get_queue_sender(QUEUE) as sender:
        with pytest.raises(ServiceBusError, match="SessionId"):
            sender.send_messages(ServiceBusMessage("no session"))
        # A batch with one message without a SessionId is refused whole.
        with pytest.raises(ServiceBusError, match="SessionId"):
            sender.send_messages([ServiceBusMessage("ok", session_id="z"), ServiceBusMessage("x")])
    with (
        client.get_topic_sender(TOPIC) as sender,
        pytest.raises(ServiceBusError, match="SessionId"),
    ):
        sender.send_messages(ServiceBusMessage("no session"))
    with pytest.raises(ServiceBusError, match="requires sessions"):
        open_receiver(client.get_queue_receiver(QUEUE))
    with pytest.raises(ServiceBusError, match="requires sessions"):
        open_receiver(client.get_subscription_receiver(TOPIC, "sessions"))
    with pytest.raises(ServiceBusError, match="does not require sessions"):
        open_receiver(client.get_subscription_receiver(TOPIC, "plain", session_id="z"))
    with pytest.raises(OperationTimeoutError):  # nothing refused was enqueued: no session
        open_receiver(
            client.get_queue_receiver(QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1)
        )


def test_session_subscription(client: ServiceBusClient) -> None:
    send(client, ("t1", "m1"), ("t2", "m2"), ("t1", "m3"), topic=True)
    with client.get_subscription_receiver(
        TOPIC, "sessions", session_id=NEXT_AVAILABLE_SESSION
    ) as receiver:
        assert receiver.session.session_id == "t1"
        got = receive(receiver, 2)
        assert [str(m) for m in got] == ["m1", "m3"]
        receiver.session.set_state(b"sub-state")
        assert receiver.session.get_state() == b"sub-state"
        with pytest.raises(SessionCannotBeLockedError):
            open_receiver(client.get_subscription_receiver(TOPIC, "sessions", session_id="t1"))
        receiver.session.renew_lock()
        for m in got:
            receiver.complete_message(m)
    with client.get_subscription_receiver(TOPIC, "sessions", session_id="t2") as receiver:
        (msg,) = receive(receiver, 1)
        assert str(msg) == "m2" and msg.session_id == "t2"
        receiver.complete_message(msg)
    # The plain subscription gets every message, session or not.
    with client.get_subscription_receiver(TOPIC, "plain") as plain:
        got = receive(plain, 3)
        assert sorted(str(m) for m in got) == ["m1", "m2", "m3"]
        for m in got:
            plain.complete_message(m)


def test_a_receiver_whose_session_lock_expired_is_detached(
    client: ServiceBusClient, session_emulator: RunningEmulator
) -> None:
    queue = session_emulator.broker.resolve(SHORT)
    assert queue is not None and queue.sessions is not None
    sessions = queue.sessions
    send(client, ("d", "d1"), queue=SHORT)
    with client.get_queue_receiver(SHORT, session_id="d", prefetch_count=0) as receiver:
        assert len(receive(receiver, 1)) == 1
        # Hide the SDK's own expiry check: the emulator's detach is what is tested.
        receiver.session._locked_until_utc = None  # type: ignore[assignment]
        deadline = time.monotonic() + SHORT_LOCK_S * 4
        while session_emulator.call(lambda: sessions["d"].owner is not None):
            assert time.monotonic() < deadline, "the session lock never expired"
            time.sleep(0.05)
        with pytest.raises(SessionLockLostError, match="Accept a new MessageSession"):
            receiver.receive_messages(max_message_count=1, max_wait_time=1)
    with client.get_queue_receiver(SHORT, session_id="d") as again:
        (redelivered,) = receive(again, 1)
        assert (str(redelivered), redelivered.delivery_count) == ("d1", 1)
        again.complete_message(redelivered)
