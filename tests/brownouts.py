"""A downstream brownout shortened by settings, for the tests that run one (issue 43): the
default backoff and a 20 s brownout, both at a quarter of their length. The same waits happen
in the same order (0.125 s doubling up to 3.75 s, a budget of 30 s, 5 s down), in a quarter of
the time; no clock is faked.

The "10-minute" brownout, longer than the in-place budget, with the default backoff and the
default delayed retries (3, 60 s apart), all at a sixtieth of their length: 10 s down, an
in-place budget of 2 s, copies 1, 2 and 3 s later; the defaults outlast 14 minutes, these 14 s."""

from __future__ import annotations

from exactly_once import Backoff, DelayedRetries

SCALE = 0.25
BROWNOUT_SECONDS = 20.0 * SCALE
SCALED_BACKOFF = Backoff(
    first_delay_seconds=Backoff().first_delay_seconds * SCALE,
    max_delay_seconds=Backoff().max_delay_seconds * SCALE,
    budget_seconds=Backoff().budget_seconds * SCALE,
)

LONG_SCALE = 1 / 60
LONG_BROWNOUT_SECONDS = 10 * 60 * LONG_SCALE
LONG_SCALED_BACKOFF = Backoff(
    first_delay_seconds=Backoff().first_delay_seconds * LONG_SCALE,
    max_delay_seconds=Backoff().max_delay_seconds * LONG_SCALE,
    budget_seconds=Backoff().budget_seconds * LONG_SCALE,
    immediate_delay_seconds=Backoff().immediate_delay_seconds * LONG_SCALE,
)
LONG_SCALED_DELAYED_RETRIES = DelayedRetries(
    retries=DelayedRetries().retries,
    delay_seconds=DelayedRetries().delay_seconds * LONG_SCALE,
)
