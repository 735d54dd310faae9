"""A downstream brownout shortened by settings, for the tests that run one (issue 43): the
default backoff and a 20 s brownout, both at a quarter of their length. The same waits happen
in the same order (0.125 s doubling up to 3.75 s, a budget of 30 s, 5 s down), in a quarter of
the time; no clock is faked."""

from __future__ import annotations

from exactly_once import Backoff

SCALE = 0.25
BROWNOUT_SECONDS = 20.0 * SCALE
SCALED_BACKOFF = Backoff(
    first_delay_seconds=Backoff().first_delay_seconds * SCALE,
    max_delay_seconds=Backoff().max_delay_seconds * SCALE,
    budget_seconds=Backoff().budget_seconds * SCALE,
)
