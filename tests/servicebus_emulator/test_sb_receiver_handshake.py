"""A receiver's open costs the SDK one poll (50 ms) per frame it reads; the emulator sends it
exactly the frames that the least possible AMQP peer (`sb_minimal_peer`) must send, so it adds
no frame, and no wait, of its own. The times themselves are measured by
`scripts/bench_receiver_open.py`, not asserted here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient
from azure.servicebus._pyamqp import _connection
from azure.servicebus._pyamqp.aio import _connection_async
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from sb_minimal_peer import MinimalPeer

from servicebus_emulator import RunningEmulator

PERFORMATIVES = {
    0x00: "header",
    0x10: "open",
    0x11: "begin",
    0x12: "attach",
    0x13: "flow",
    0x14: "transfer",
}
PERFORMATIVES |= {0x15: "disposition", 0x16: "detach", 0x17: "end", 0x18: "close"}


@pytest.fixture
def read_frames(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The performatives the SDK's connections process, in order (sync and aio)."""
    seen: list[str] = []

    def name(frame: Any) -> None:
        if isinstance(frame, tuple):
            seen.append(PERFORMATIVES.get(frame[0], hex(frame[0])))

    sync_process = _connection.Connection._process_incoming_frame
    async_process = _connection_async.Connection._process_incoming_frame

    def recording(self: Any, channel: int, frame: Any) -> bool:
        name(frame)
        return bool(sync_process(self, channel, frame))

    async def async_recording(self: Any, channel: int, frame: Any) -> bool:
        name(frame)
        return bool(await async_process(self, channel, frame))

    monkeypatch.setattr(_connection.Connection, "_process_incoming_frame", recording)
    monkeypatch.setattr(_connection_async.Connection, "_process_incoming_frame", async_recording)
    yield seen


def _open_and_close_sync(connection_string: str, queue: str) -> None:
    with (
        ServiceBusClient.from_connection_string(connection_string) as client,
        client.get_queue_receiver(queue),
    ):
        pass


def _open_and_close_aio(connection_string: str, queue: str) -> None:
    async def scenario() -> None:
        async with (
            AsyncServiceBusClient.from_connection_string(connection_string) as client,
            client.get_queue_receiver(queue),
        ):
            pass

    asyncio.run(scenario())


@pytest.mark.parametrize("open_and_close", [_open_and_close_sync, _open_and_close_aio])
def test_the_emulator_sends_a_receiver_only_the_frames_any_peer_must_send(
    open_and_close: Callable[[str, str], None],
    emulator: RunningEmulator,
    queue_name: str,
    read_frames: list[str],
) -> None:
    with MinimalPeer() as peer:
        open_and_close(peer.connection_string, queue_name)
    least = list(read_frames)
    read_frames.clear()
    open_and_close(emulator.connection_string, queue_name)
    # The AMQP header, open, begin, the two $cbs attaches, credit for the put-token, its reply
    # and settlement, the receiver's attach; the SDK closes without waiting for any answer.
    assert least == [
        "header",
        "open",
        "begin",
        "attach",
        "attach",
        "flow",
        "transfer",
        "disposition",
        "attach",
    ]
    assert read_frames == least
