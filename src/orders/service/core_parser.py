"""The app's message parsers as the core's front door takes them.

A consumer added as docs/new-consumer.md shows is a door of its own, made with the core's
`@exactly_once` and driven by the hosts as it is; the one thing of the app it needs besides its
parser is the app's reasons in its dead letters, which `core_parser` gives it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from exactly_once import Rejected
from orders.domain.messages import MessageRejected

Parsed = TypeVar("Parsed")


def core_parser(parse: Callable[[bytes], Parsed]) -> Callable[[bytes], Parsed]:
    """The app's parser (raising `MessageRejected`) as the core's (raising `Rejected`), so a
    dead letter names the app's reason, as the app's own consumers' do."""

    def parsed(body: bytes) -> Parsed:
        try:
            return parse(body)
        except MessageRejected as rejection:
            raise Rejected(rejection.description, reason=rejection.reason.value) from rejection

    return parsed
