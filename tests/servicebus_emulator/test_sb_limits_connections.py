"""The cap on open AMQP connections (`--max-connections`): over it, a connection is refused
at its AMQP open with a clear error through the SDK; a closed connection frees its place."""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusConnectionError, ServiceBusError
from sb_process import wait_until
from sb_raw_amqp import RawClient
from sb_support import queue_config, queue_entry

from servicebus_emulator import start_in_background
from servicebus_emulator.__main__ import main
from servicebus_emulator.connection import DEFAULT_MAX_CONNECTIONS

QUEUE = "capped"
CONFIG = queue_config(queue_entry(QUEUE))


def _send(conn_str: str, body: str) -> None:
    with (
        ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client,
        client.get_queue_sender(QUEUE) as sender,
    ):
        sender.send_messages(ServiceBusMessage(body))


def _opened(host: str, port: int, count: int) -> list[RawClient]:
    """Connections past their AMQP open, each proven usable by a session it began."""
    clients = [RawClient(host, port) for _ in range(count)]
    for raw in clients:
        raw.handshake(begin=True)
    return clients


def test_a_connection_over_the_cap_is_refused_with_a_clear_error_until_one_closes() -> None:
    with start_in_background(config=CONFIG, max_connections=2) as emu:
        held = _opened(emu.host, emu.port, 2)
        try:
            # The SDK reports a connection closed at open as a connection error, with the
            # emulator's condition and description.
            with pytest.raises(ServiceBusConnectionError) as refused:
                _send(emu.connection_string, "refused")
            assert "amqp:resource-limit-exceeded" in str(refused.value)
            assert "allows 2 concurrent connections" in str(refused.value)
            assert "--max-connections" in str(refused.value)
            held.pop().close()

            def sent() -> bool:
                try:
                    _send(emu.connection_string, "after")
                except ServiceBusError:
                    return False
                return True

            assert wait_until(sent, timeout=10)
        finally:
            for raw in held:
                raw.close()
        with (
            ServiceBusClient.from_connection_string(emu.connection_string) as client,
            client.get_queue_receiver(QUEUE) as receiver,
        ):
            assert [str(m) for m in receiver.receive_messages(max_wait_time=5)] == ["after"]


def test_the_default_cap_leaves_room_beyond_the_official_emulators_ten() -> None:
    assert DEFAULT_MAX_CONNECTIONS >= 50  # `orders up` and the demo hold more than ten
    with start_in_background(config=CONFIG) as emu:
        held = _opened(emu.host, emu.port, 11)
        try:
            _send(emu.connection_string, "twelfth")
        finally:
            for raw in held:
                raw.close()


def test_the_cap_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--max-connections", "0"])
    assert exited.value.code == 2
    assert "--max-connections: must be at least 1" in capsys.readouterr().err
