"""`orders up`'s Ctrl-C during the start: cut short at once, but never between starting a
child and recording it (the e2e drill in tests/e2e/test_up.py hits that window by chance)."""

from __future__ import annotations

import signal

import pytest

from orders.entrypoints.up import StartInterrupted, StartSignals


def test_a_signal_while_starting_cuts_the_start_short() -> None:
    lines: list[str] = []
    signals = StartSignals(lines.append)
    with pytest.raises(StartInterrupted):
        signals.handle(signal.SIGINT, None)
    assert signals.stopped.is_set() and lines == ["SIGINT: stopping the local stack"]


def test_a_signal_inside_a_held_section_waits_for_its_end() -> None:
    signals = StartSignals(lambda line: None)
    recorded: list[str] = []
    with pytest.raises(StartInterrupted), signals.held():
        with signals.held():
            signals.handle(signal.SIGTERM, None)  # deferred, not raised here
            recorded.append("child")
        recorded.append("outer")  # the inner section's end is not the outermost one
    assert recorded == ["child", "outer"] and signals.stopped.is_set()


def test_a_second_signal_and_a_signal_after_the_start_only_stop() -> None:
    signals = StartSignals(lambda line: None)
    signals.starting = False
    signals.handle(signal.SIGINT, None)
    signals.handle(signal.SIGINT, None)
    with signals.held():
        pass
    assert signals.stopped.is_set()
