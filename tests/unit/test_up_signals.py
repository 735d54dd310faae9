"""Ctrl-C while the local stack starts (`orders up`, `orders demo`): the start is cut short at
once, but never between starting a child and recording it, where the signal waits (the e2e
drills in tests/e2e/test_up.py and test_demo.py hit that window only by chance)."""

from __future__ import annotations

import signal

import pytest

from orders.entrypoints.localstack import signals_deferred
from orders.entrypoints.up import StartInterrupted, StartSignals


def test_a_signal_while_starting_cuts_the_start_short() -> None:
    lines: list[str] = []
    signals = StartSignals(lines.append)
    with pytest.raises(StartInterrupted):
        signals.handle(signal.SIGINT, None)
    assert signals.stopped.is_set() and lines == ["SIGINT: stopping the local stack"]


def test_a_second_signal_and_a_signal_after_the_start_only_stop() -> None:
    signals = StartSignals(lambda line: None)
    signals.starting = False
    signals.handle(signal.SIGINT, None)
    signals.handle(signal.SIGINT, None)
    assert signals.stopped.is_set()


def test_a_signal_inside_the_deferred_block_reaches_its_handler_after_it() -> None:
    steps: list[str] = []

    def handler(signum: int, frame: object) -> None:
        steps.append(f"handled {signal.Signals(signum).name}")
        raise StartInterrupted

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(StartInterrupted), signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            steps.append("child started")
            steps.append("child recorded")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert steps == ["child started", "child recorded", "handled SIGTERM"]
    assert signal.getsignal(signal.SIGTERM) is previous


def test_without_a_signal_the_handlers_are_put_back_untouched() -> None:
    before = signal.getsignal(signal.SIGINT)
    with signals_deferred():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
