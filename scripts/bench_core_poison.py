"""What refusing each of the exactly_once core's poison cases costs (prints numbers, asserts
nothing).

For the core's cases of the poison corpus (tests/poison_corpus.py): the CPU time, in
microseconds, of `ExactlyOnceConsumer.decide` on each poison message (bounds, parser, error
frame; no store is reached), of the request hash on each hostile body the dependency takes, and
of the `Idempotency-Key` check on each hostile header value. The median and the worst of
`--repeat` runs, worst first. The goal is "a few milliseconds at most" for every case.

    python scripts/bench_core_poison.py [--repeat 50]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_poison import machine
from fastapi import HTTPException
from poison_corpus import (
    CORE_MAX_BODY_BYTES,
    core_parse,
    core_poison_cases,
    idempotency_key_body_cases,
    idempotency_key_header_cases,
)

from exactly_once import ConsumerOptions, Effects, Outcome, exactly_once
from exactly_once.http import validate_key
from exactly_once.store import body_fingerprint
from orders.domain.received import BodyKind


class NoStore:
    """Every poison case is decided before the store: reaching it is a mistake."""

    def __getattr__(self, name: str) -> NoReturn:
        raise AssertionError(f"a poison case reached the store ({name})")


async def never(message: dict[str, Any], effects: Effects) -> Outcome:
    raise AssertionError("a poison case reached the effect")


def cost(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    samples: list[float] = []
    for _ in range(repeat):
        started = time.process_time()
        run()
        samples.append((time.process_time() - started) * 1e6)
    return max(samples), statistics.median(samples)


def header_check(value: bytes) -> Callable[[], object]:
    def check() -> object:
        try:
            return validate_key(value.decode("latin-1"))  # as Starlette decodes header values
        except HTTPException as refused:
            return refused.status_code

    return check


def rows_of(repeat: int) -> list[tuple[float, float, str, int]]:
    # Each refusal logs a WARNING outcome line; unconfigured, Python prints it to the terminal,
    # whose speed is not the consumer's cost (the call on a logger turned down stays counted).
    logging.getLogger("exactly_once.outcomes").setLevel(logging.ERROR)
    consumer = exactly_once(
        consumer="bench",
        parse=core_parse,
        store=NoStore(),
        options=ConsumerOptions(max_body_bytes=CORE_MAX_BODY_BYTES),
    )(never)
    loop = asyncio.new_event_loop()
    rows: list[tuple[float, float, str, int]] = []
    for case in core_poison_cases("bench"):
        if case.body_kind is BodyKind.DATA:  # `decide` takes bytes; the others are not data
            body, message_id = case.body, case.message_id

            def decide(body: bytes = body, message_id: str | None = message_id) -> object:
                return loop.run_until_complete(consumer.decide(body, message_id))

            rows.append((*cost(decide, repeat), f"message {case.name}", len(body)))
    for name, body, _ in idempotency_key_body_cases(CORE_MAX_BODY_BYTES):
        hashing = cost(partial(body_fingerprint, body), repeat)
        rows.append((*hashing, f"hash {name}", len(body)))
    for header in idempotency_key_header_cases():
        for _, value in header.headers[:1]:
            rows.append((*cost(header_check(value), repeat), f"header {header.name}", len(value)))
    loop.close()
    return sorted(rows, reverse=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args(argv)
    rows = rows_of(args.repeat)
    print(machine())
    print(f"{'case':44} {'bytes':>8} {'median us':>10} {'worst us':>10}")
    for worst, median, name, size in rows:
        print(f"{name:44} {size:8d} {median:10.0f} {worst:10.0f}")
    print(f"{len(rows)} cases; worst median {max(row[1] for row in rows):.0f} us")


if __name__ == "__main__":
    main()
