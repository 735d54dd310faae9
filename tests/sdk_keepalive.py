"""azure-servicebus's keep-alive, minus its second of latency on close, for the processes of the
test run (tests/conftest.py installs it; the emulators, workers and CLIs the tests start as
processes run the SDK as shipped).

Every sender and receiver of the SDK's pure-Python AMQP stack starts a keep-alive loop (a thread,
or a task in `aio`) that listens on the connection every `keep_alive_interval` seconds and checks
for shutdown between sleeps of one whole second; `close()` waits for that loop to end. So a
sender or receiver that lives under a second costs a second more to close (measured: a sync
sender's open, send and close take 1.0 s, of which 0.02 s is the work), and the suite opens and
closes thousands of them. Here the loop is the same loop, listening at the same interval, but it
sleeps in slices of `SLICE_SECONDS`, so close waits at most one slice
(tests/servicebus_emulator/test_sb_sdk_keepalive.py holds both to it).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from azure.servicebus._pyamqp import client as sync_client
from azure.servicebus._pyamqp.aio import _client_async as aio_client

SLICE_SECONDS = 0.02
# The SDK's own sleep between two looks at the clock, kept: the interval is counted as it counts.
SDK_TICK_SECONDS = 1.0


def _keep_alive(self: Any) -> None:
    start_time = time.time()
    try:
        while self._connection and not self._shutdown:
            current_time = time.time()
            if current_time - start_time >= self._keep_alive_interval:
                self._connection.listen(
                    wait=self._socket_timeout, batch=self._link.current_link_credit
                )
                start_time = current_time
            tick_ends = time.monotonic() + SDK_TICK_SECONDS
            while not self._shutdown and time.monotonic() < tick_ends:
                time.sleep(SLICE_SECONDS)
    except Exception as error:  # the SDK's loop logs and ends the same way
        sync_client._logger.debug(
            "Connection keep-alive for %r failed: %r.", type(self).__name__, error
        )


async def _keep_alive_async(self: Any) -> None:
    start_time = time.time()
    try:
        while self._connection and not self._shutdown:
            current_time = time.time()
            if current_time - start_time >= self._keep_alive_interval:
                await asyncio.shield(
                    self._connection.listen(
                        wait=self._socket_timeout, batch=self._link.current_link_credit
                    )
                )
                start_time = current_time
            tick_ends = time.monotonic() + SDK_TICK_SECONDS
            # The SDK's close sets a plain attribute, not an event: polled, as the SDK polls it.
            while not self._shutdown and time.monotonic() < tick_ends:  # noqa: ASYNC110
                await asyncio.sleep(SLICE_SECONDS)
    except Exception as error:  # the SDK's loop logs and ends the same way
        aio_client._logger.info(
            "Connection keep-alive for %r failed: %r.", type(self).__name__, error
        )


def install() -> None:
    """Put the sliced loops in place of the SDK's, once per process."""
    # An SDK that renamed its loops would keep its own: say so rather than patch nothing.
    for owner, name in (
        (sync_client.AMQPClient, "_keep_alive"),
        (aio_client.AMQPClientAsync, "_keep_alive_async"),
    ):
        if not callable(getattr(owner, name, None)):
            raise RuntimeError(f"azure-servicebus has no {owner.__name__}.{name}: see {__file__}")
    sync_client.AMQPClient._keep_alive = _keep_alive  # type: ignore[method-assign]
    aio_client.AMQPClientAsync._keep_alive_async = _keep_alive_async  # type: ignore[method-assign]
