"""The outbox dispatcher's decisions over fakes: leases judged by the database's clock,
checkpoints, publish-then-mark, and a failed publish that keeps the checkpoint."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import LAYOUT, FakeLeaseStore, new_write

from exactly_once.change_feed import ChangePage, EpkRange
from orders.domain.events import OrderEvent, message_id_names_event
from orders.exceptions import TransientPublishError
from orders.service.dispatcher import OutboxDispatcher

RANGE = EpkRange("", "FF").text


class ListFeed:
    """One feed range over a list of changes; the continuation is an index into it."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.documents = documents
        self.marked: list[str] = []

    async def feed_ranges(self) -> list[str]:
        return [RANGE]

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        start = int(continuation or 0)
        page = self.documents[start : start + max_items]
        return ChangePage(page, str(start + len(page)))

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        self.marked.append(document["id"])


class Events:
    def __init__(self) -> None:
        self.published: list[str] = []
        self.message_ids: list[str] = []
        self.fail_next: Exception | None = None

    async def publish_event(
        self, event: OrderEvent, trace_context: dict[str, str], *, message_id: str
    ) -> None:
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        self.published.append(event.event_id)
        self.message_ids.append(message_id)


def outbox_changes(*order_ids: str) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    for order_id in order_ids:
        changes.extend(new_write(order_id))
    return changes


@pytest.fixture
def leases() -> FakeLeaseStore:
    return FakeLeaseStore()


async def test_publishes_then_marks_each_event_once_and_checkpoints(
    leases: FakeLeaseStore,
) -> None:
    feed, events = ListFeed(outbox_changes("a", "b")), Events()
    dispatcher = OutboxDispatcher(feed, events, leases, LAYOUT, owner="d1", page_size=100)

    await dispatcher.run_once()
    await dispatcher.run_once()  # nothing new: nothing published again

    assert events.published == feed.marked == ["a:outbox:OrderAccepted", "b:outbox:OrderAccepted"]
    lease = leases.leases[RANGE]
    assert (lease.owner, lease.continuation) == ("d1", str(len(feed.documents)))


async def test_a_failed_publish_keeps_the_checkpoint_so_the_next_round_publishes_again(
    leases: FakeLeaseStore,
) -> None:
    feed, events = ListFeed(outbox_changes("a")), Events()
    dispatcher = OutboxDispatcher(feed, events, leases, LAYOUT, owner="d1")
    events.fail_next = TransientPublishError("broker busy")

    with pytest.raises(TransientPublishError):
        await dispatcher.run_once()
    await dispatcher.run_once()

    assert events.published == ["a:outbox:OrderAccepted"]
    assert leases.leases[RANGE].continuation == str(len(feed.documents))


async def test_every_dispatch_of_one_outbox_document_sends_the_message_id_stored_on_it(
    leases: FakeLeaseStore,
) -> None:
    """A crash between publish and mark (or the Functions trigger's retry of a batch) publishes
    the document again: with the same MessageId, so the topic's duplicate detection drops the
    copy. That MessageId is the one drawn when the document was written, not the event id
    another sender could guess (issue 37)."""
    changes = outbox_changes("a", "b")
    [first_entry, second_entry] = [d for d in changes if d["type"] == "outbox"]
    events = Events()
    dispatcher = OutboxDispatcher(ListFeed(changes), events, leases, LAYOUT, owner="d1")

    await dispatcher.dispatch(changes)
    await dispatcher.dispatch(changes)  # the mark never landed: the same documents again

    assert events.published == ["a:outbox:OrderAccepted", "b:outbox:OrderAccepted"] * 2
    assert events.message_ids == [first_entry["messageId"], second_entry["messageId"]] * 2
    assert first_entry["messageId"] != second_entry["messageId"]
    for entry in (first_entry, second_entry):
        assert entry["messageId"] != entry["id"]  # not the predictable event id
        assert message_id_names_event(entry["messageId"], entry["id"])


async def test_an_outbox_document_written_before_the_stored_message_id_is_sent_under_its_event_id(
    leases: FakeLeaseStore,
) -> None:
    """An entry written before this change has no `messageId`: it is published under its event
    id, the MessageId it had then, on every dispatch (a nonce drawn at dispatch would differ
    on each retry, and from a publish of it made before the upgrade)."""
    [old_entry] = [d for d in outbox_changes("old") if d["type"] == "outbox"]
    del old_entry["messageId"]
    events = Events()
    dispatcher = OutboxDispatcher(ListFeed([old_entry]), events, leases, LAYOUT, owner="d1")

    await dispatcher.dispatch([old_entry])
    await dispatcher.dispatch([old_entry])

    assert events.message_ids == ["old:outbox:OrderAccepted"] * 2


async def test_a_live_lease_of_another_dispatcher_is_left_alone_until_it_ends(
    leases: FakeLeaseStore,
) -> None:
    feed = ListFeed(outbox_changes("a"))
    first = OutboxDispatcher(feed, Events(), leases, LAYOUT, owner="d1", lease_seconds=10)
    await first.run_once()
    feed.documents += outbox_changes("b")
    second_events = Events()
    second = OutboxDispatcher(feed, second_events, leases, LAYOUT, owner="d2", lease_seconds=10)

    assert await second.run_once() == 0  # d1's lease is live by the database's clock
    leases.database_now_ms += 12_000  # d1 stopped renewing: its lease ends
    await second.run_once()

    assert second_events.published == ["b:outbox:OrderAccepted"]  # resumed from d1's checkpoint
    assert leases.leases[RANGE].owner == "d2"


async def test_a_released_lease_is_taken_at_once(leases: FakeLeaseStore) -> None:
    feed = ListFeed(outbox_changes("a"))
    first = OutboxDispatcher(feed, Events(), leases, LAYOUT, owner="d1", lease_seconds=10)
    await first.run_once()
    await first.release()
    feed.documents += outbox_changes("b")
    second_events = Events()

    await OutboxDispatcher(feed, second_events, leases, LAYOUT, owner="d2").run_once()

    assert second_events.published == ["b:outbox:OrderAccepted"]
