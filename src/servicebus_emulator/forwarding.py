"""Auto-forwarding chains, checked once when the configuration loads.

Service Bus moves a message that passes through more than four auto-forwarding hops (or that
its target cannot take) to the source's transfer dead-letter queue. This emulator has no
transfer dead-letter queue, so it refuses at load time every configuration in which that
could happen: a target that does not exist or is the entity itself, a loop, a chain longer
than four hops, and dead letters forwarded towards an entity requiring sessions from an entity
that does not (a dead-lettered message there may have no SessionId). Then forwarding never
fails at run time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

MAX_HOPS = 4


class ForwardingError(ValueError):
    """An auto-forwarding setting that Service Bus would refuse or could not always honour."""


@dataclass(frozen=True, slots=True)
class Entity:
    """A queue, topic or subscription as the forwarding check sees it."""

    name: str
    kind: str  # "queue", "topic" or "subscription"
    requires_session: bool = False
    forward_to: str | None = None
    forward_dead_lettered_to: str | None = None
    subscriptions: tuple[str, ...] = ()  # a topic's subscriptions (entity names)


def check_forwarding(entities: list[Entity]) -> None:
    """Raise ForwardingError for the first problem found."""
    by_key = {entity.name.lower(): entity for entity in entities}
    for entity in entities:
        for key, target in _targets(entity):
            found = by_key.get(target.lower())
            if found is None or found.kind == "subscription":
                raise ForwardingError(
                    f"{entity.kind} {entity.name!r}: {key} {target!r} names no queue or topic"
                )
            if found is entity:
                raise ForwardingError(f"{entity.kind} {entity.name!r}: {key} names itself")
    longest: dict[str, list[str]] = {}
    for entity in entities:
        chain = _longest_chain(entity.name.lower(), by_key, longest, [])
        if _hops(chain, by_key) > MAX_HOPS:
            raise ForwardingError(
                f"the auto-forwarding chain {' -> '.join(chain)} has {_hops(chain, by_key)} "
                f"hops; Service Bus allows at most {MAX_HOPS}"
            )
    needs_session: dict[str, bool] = {}
    for entity in entities:
        dead_letters_to = entity.forward_dead_lettered_to
        if (
            dead_letters_to is not None
            and not entity.requires_session
            and _needs_session(dead_letters_to.lower(), by_key, needs_session)
        ):
            raise ForwardingError(
                f"{entity.kind} {entity.name!r}: ForwardDeadLetteredMessagesTo "
                f"{dead_letters_to!r} leads "
                "to an entity that requires sessions, and a dead letter of an entity without "
                "sessions may have no SessionId"
            )


def _targets(entity: Entity) -> Iterator[tuple[str, str]]:
    if entity.forward_to is not None:
        yield "ForwardTo", entity.forward_to
    if entity.forward_dead_lettered_to is not None:
        yield "ForwardDeadLetteredMessagesTo", entity.forward_dead_lettered_to


def _next(entity: Entity) -> list[str]:
    """Where a message can go from an entity: its forwarding targets, a topic's subscriptions."""
    return [target.lower() for _, target in _targets(entity)] + [
        name.lower() for name in entity.subscriptions
    ]


def _hops(chain: list[str], by_key: dict[str, Entity]) -> int:
    """Forwarding hops along a chain of entity names (a topic's fan-out is not a hop)."""
    return sum(1 for name in chain[:-1] if by_key[name.lower()].kind != "topic")


def _longest_chain(
    key: str, by_key: dict[str, Entity], longest: dict[str, list[str]], path: list[str]
) -> list[str]:
    """The chain with the most hops that starts at `key` (entity names); `path` is the walk
    so far, to report a loop."""
    if key in longest:
        return longest[key]
    entity = by_key[key]
    if entity.name in path:
        loop = [*path[path.index(entity.name) :], entity.name]
        raise ForwardingError(
            f"auto-forwarding loop {' -> '.join(loop)}: a message would go round it forever"
        )
    best = [entity.name]
    for target in _next(entity):
        chain = [entity.name, *_longest_chain(target, by_key, longest, [*path, entity.name])]
        if _hops(chain, by_key) > _hops(best, by_key):
            best = chain
    longest[key] = best
    return best


def _needs_session(key: str, by_key: dict[str, Entity], memo: dict[str, bool]) -> bool:
    """True when a message sent to the entity can reach one that requires sessions."""
    if key not in memo:
        entity = by_key[key]
        onward = [entity.forward_to.lower()] if entity.forward_to else []
        onward += [name.lower() for name in entity.subscriptions]
        memo[key] = entity.requires_session or any(
            _needs_session(name, by_key, memo) for name in onward
        )
    return memo[key]
