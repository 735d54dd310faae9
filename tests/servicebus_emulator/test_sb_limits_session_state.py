"""Session state is bounded by the message size limit (256 KB), through the SDK: a bigger
`set_state` is refused with the SDK's MessageSizeExceededError and the state kept before it
stays, in memory and across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient
from azure.servicebus.exceptions import MessageSizeExceededError
from sb_support import queue_config, queue_entry

from servicebus_emulator import RunningEmulator, start_in_background
from servicebus_emulator.connection import MAX_MESSAGE_SIZE

CONFIG = queue_config(queue_entry("sessions", RequiresSession=True))
# Under the limit with the request's own few hundred bytes around it.
LARGEST = b"s" * (MAX_MESSAGE_SIZE - 1024)


def _state(emu: RunningEmulator, new_state: bytes | None = None) -> bytes | None:
    """Set the session's state (when given) on a fresh receiver, then read it back."""
    with (
        ServiceBusClient.from_connection_string(emu.connection_string) as client,
        client.get_queue_receiver("sessions", session_id="order-1") as receiver,
    ):
        assert receiver.session is not None
        if new_state is not None:
            receiver.session.set_state(new_state)
        state = receiver.session.get_state()
        assert state is None or isinstance(state, bytes)
        return state


def test_session_state_over_the_message_size_limit_is_refused_and_the_old_state_kept(
    tmp_path: Path,
) -> None:
    with start_in_background(config=CONFIG, data_dir=tmp_path / "data") as emu:
        assert _state(emu, LARGEST) == LARGEST
        # One refusal per receiver: after it the SDK's management link repeats the error.
        for size in (MAX_MESSAGE_SIZE, 4 * MAX_MESSAGE_SIZE):
            with pytest.raises(MessageSizeExceededError, match="exceeds the limit of 262144"):
                _state(emu, b"x" * size)
        assert _state(emu) == LARGEST

    with start_in_background(config=CONFIG, data_dir=tmp_path / "data") as emu:
        assert _state(emu) == LARGEST
