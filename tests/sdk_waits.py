"""Two waits of azure-servicebus made short for the processes of the test run: the keep-alive
loop's second on every close, and the 50 ms poll while a sender or receiver opens
(tests/conftest.py installs both; the emulators, workers and commands the tests start as
processes run the SDK as shipped).

Every sender and receiver of the SDK's pure-Python AMQP stack starts a keep-alive loop (a thread,
or a task in `aio`) that listens on the connection every `keep_alive_interval` seconds and checks
for shutdown between sleeps of one whole second; `close()` waits for that loop to end. So a
sender or receiver that lives under a second costs a second more to close (measured: a sync
sender's open, send and close take 1.0 s, of which 0.02 s is the work), and the suite opens and
closes thousands of them. Here the loop is the same loop, listening at the same interval, but it
sleeps in slices of `SLICE_SECONDS`, so close waits at most one slice.

Opening a sender or receiver polls `client_ready()` with a sleep of 50 ms between looks, and the
handshake (connection, session, token, link) takes several looks: 0.46 s per open against our
emulator, which answers at once. Here the same loop sleeps `OPEN_POLL_SECONDS` between looks.

tests/servicebus_emulator/test_sb_sdk_waits.py holds both to it, and the keep-alive loop to
listening still.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import types
from collections.abc import Awaitable
from typing import Any

from azure.servicebus import _servicebus_receiver, _servicebus_sender, _session_browser
from azure.servicebus._pyamqp import client as sync_client
from azure.servicebus._pyamqp.aio import _client_async as aio_client
from azure.servicebus.aio import (
    _servicebus_receiver_async,
    _servicebus_sender_async,
    _session_browser_async,
)

SLICE_SECONDS = 0.02
SDK_OPEN_POLL_SECONDS = 0.05
OPEN_POLL_SECONDS = 0.005
# The modules whose only sleep is the open poll (install() checks that it still is).
SYNC_OPENERS = (_servicebus_sender, _servicebus_receiver, _session_browser)
ASYNC_OPENERS = (_servicebus_sender_async, _servicebus_receiver_async, _session_browser_async)
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


def _open_poll(seconds: float) -> float:
    return OPEN_POLL_SECONDS if seconds == SDK_OPEN_POLL_SECONDS else seconds


class _TimeWithShortOpenPoll(types.ModuleType):
    """`time` as the sync openers see it: the same module, but the open poll's sleep is short."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(_open_poll(seconds))


class _AsyncioWithShortOpenPoll(types.ModuleType):
    """`asyncio` as the async openers see it, with the same one difference."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    def sleep(seconds: float, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return asyncio.sleep(_open_poll(seconds), *args, **kwargs)


def _only_sleep_is_the_open_poll(module: types.ModuleType) -> None:
    source = inspect.getsource(module)
    if source.count("sleep(") != 1 or f"sleep({SDK_OPEN_POLL_SECONDS})" not in source:
        raise RuntimeError(
            f"{module.__name__} no longer sleeps only in its open poll: see {__file__}"
        )


def install() -> None:
    """Put the sliced loops in place of the SDK's, and the short open poll, once per process."""
    # An SDK that renamed its loops would keep its own: say so rather than patch nothing.
    for owner, name in (
        (sync_client.AMQPClient, "_keep_alive"),
        (aio_client.AMQPClientAsync, "_keep_alive_async"),
    ):
        if not callable(getattr(owner, name, None)):
            raise RuntimeError(f"azure-servicebus has no {owner.__name__}.{name}: see {__file__}")
    for module in (*SYNC_OPENERS, *ASYNC_OPENERS):
        _only_sleep_is_the_open_poll(module)
    sync_client.AMQPClient._keep_alive = _keep_alive  # type: ignore[method-assign]
    aio_client.AMQPClientAsync._keep_alive_async = _keep_alive_async  # type: ignore[method-assign]
    for module in SYNC_OPENERS:
        module.time = _TimeWithShortOpenPoll("time")  # type: ignore[attr-defined]
    for module in ASYNC_OPENERS:
        module.asyncio = _AsyncioWithShortOpenPoll("asyncio")  # type: ignore[attr-defined]
