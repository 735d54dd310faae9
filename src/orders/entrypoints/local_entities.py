"""A user's own queues, topics and Cosmos DB containers, added to the stack `orders up` starts.

The file is JSON in the shape an Azure developer already has: the official Service Bus
emulator's `Config.json` (`UserConfig.Namespaces[0]` with `Queues` and `Topics`; either may be
left out here, where the official schema requires both) and a `Cosmos` section whose containers
read as the Bicep's `resource` of a container (`id`, `partitionKey.paths`, `defaultTtl`) plus
the `database` they belong to. Every field is checked before anything starts, and an error
names the field; an entity named as one of the app's own is refused, never merged over it.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_pascal

NAMESPACE_NAME: Final = "sbemulatorns"
# Service Bus allows at most 50 queues and topics in the emulator's namespace, the app's included.
MAX_ENTITIES = 50
_DURATION = re.compile(r"^P(?!$)(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$")


class EntitiesError(ValueError):
    """The entities file cannot be read, or asks for what the stack cannot add."""


def _duration(text: str) -> str:
    if not _DURATION.match(text):
        raise ValueError(
            f"{text!r} is not an ISO 8601 duration in days, hours, minutes and seconds, "
            "such as PT30S or P1D"
        )
    return text


def _partition_key_path(text: str) -> str:
    if not re.fullmatch(r"/[^/]+", text):
        raise ValueError(f"{text!r} is not a partition key path such as /pk")
    return text


Duration = Annotated[str, AfterValidator(_duration)]
# Names as Service Bus takes them: letters, digits, `-`, `.`, `_` (and `/` in a queue's path).
QueueName = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9]$|^[A-Za-z0-9][\w\-./]*[A-Za-z0-9]$", max_length=260)
]
TopicName = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9]$|^[A-Za-z0-9][\w\-.]*[A-Za-z0-9]$", max_length=260)
]
SubscriptionName = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9]$|^[A-Za-z0-9][\w\-.]*[A-Za-z0-9]$", max_length=50)
]


class _Pascal(BaseModel):
    """The official config's PascalCase field names; unknown fields are refused by name."""

    model_config = ConfigDict(alias_generator=to_pascal, extra="forbid", frozen=True)


class QueueProperties(_Pascal):
    dead_lettering_on_message_expiration: StrictBool | None = None
    default_message_time_to_live: Duration | None = None
    duplicate_detection_history_time_window: Duration | None = None
    forward_dead_lettered_messages_to: str | None = None
    forward_to: str | None = None
    lock_duration: Duration | None = None
    max_delivery_count: Annotated[StrictInt, Field(ge=1)] | None = None
    requires_duplicate_detection: StrictBool | None = None
    requires_session: StrictBool | None = None


class Queue(_Pascal):
    name: QueueName
    properties: QueueProperties = QueueProperties()


class RuleProperties(_Pascal):
    # The filter's own syntax is the emulator's to judge, when it starts.
    filter_type: Literal["Sql", "Correlation"]
    sql_filter: dict[str, Any] | None = None
    correlation_filter: dict[str, Any] | None = None
    action: dict[str, Any] | None = None


class Rule(_Pascal):
    name: SubscriptionName
    properties: RuleProperties


class SubscriptionProperties(_Pascal):
    dead_lettering_on_message_expiration: StrictBool | None = None
    default_message_time_to_live: Duration | None = None
    forward_dead_lettered_messages_to: str | None = None
    forward_to: str | None = None
    lock_duration: Duration | None = None
    max_delivery_count: Annotated[StrictInt, Field(ge=1)] | None = None
    requires_session: StrictBool | None = None


class Subscription(_Pascal):
    name: SubscriptionName
    properties: SubscriptionProperties = SubscriptionProperties()
    rules: list[Rule] | None = None


class TopicProperties(_Pascal):
    default_message_time_to_live: Duration | None = None
    duplicate_detection_history_time_window: Duration | None = None
    requires_duplicate_detection: StrictBool | None = None


class Topic(_Pascal):
    name: TopicName
    properties: TopicProperties = TopicProperties()
    subscriptions: Annotated[list[Subscription], Field(min_length=1)]

    @model_validator(mode="after")
    def _subscriptions_once(self) -> Topic:
        _once([s.name for s in self.subscriptions], f"topic {self.name!r}: subscription")
        return self


class Namespace(_Pascal):
    name: Literal["sbemulatorns"] = NAMESPACE_NAME
    # The official schema requires both lists; here a file may leave out the one it has none of.
    queues: list[Queue] = []
    topics: list[Topic] = []

    @model_validator(mode="after")
    def _entities_once(self) -> Namespace:
        _once([q.name for q in self.queues] + [t.name for t in self.topics], "entity")
        return self


class UserConfig(_Pascal):
    namespaces: Annotated[list[Namespace], Field(min_length=1, max_length=1)]
    # The official file's logging section is accepted and ignored: the stack logs to its folder.
    logging: dict[str, Any] | None = None


class PartitionKey(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    paths: Annotated[list[Annotated[str, AfterValidator(_partition_key_path)]], Field(min_length=1)]
    kind: Literal["Hash"] = "Hash"

    @model_validator(mode="after")
    def _one_path(self) -> PartitionKey:
        if len(self.paths) != 1:
            raise ValueError("one path only: hierarchical partition keys are not supported here")
        return self


class CosmosContainer(BaseModel):
    """A container as Bicep declares one (`id`, `partitionKey`, `defaultTtl`) in `database`."""

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)

    database: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^/\\?#]+$")]
    id: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^/\\?#]+$")]
    partition_key: PartitionKey
    # -1: time-to-live on, no default expiry (what the core's records need); absent: off.
    default_ttl: StrictInt | None = None

    @model_validator(mode="after")
    def _ttl(self) -> CosmosContainer:
        if self.default_ttl is not None and self.default_ttl != -1 and self.default_ttl < 1:
            raise ValueError("defaultTtl is -1 (on, no default expiry) or a number of seconds")
        return self

    @property
    def partition_key_path(self) -> str:
        return self.partition_key.paths[0]


class Cosmos(BaseModel):
    model_config = ConfigDict(alias_generator=to_pascal, extra="forbid", frozen=True)

    containers: list[CosmosContainer]

    @model_validator(mode="after")
    def _containers_once(self) -> Cosmos:
        _once([f"{c.database}/{c.id}" for c in self.containers], "container", fold_case=False)
        return self


class LocalEntities(BaseModel):
    """The whole file: Service Bus entities (`UserConfig`), containers (`Cosmos`), or both."""

    model_config = ConfigDict(alias_generator=to_pascal, extra="forbid", frozen=True)

    user_config: UserConfig | None = None
    cosmos: Cosmos | None = None

    @model_validator(mode="after")
    def _something(self) -> LocalEntities:
        if self.user_config is None and self.cosmos is None:
            raise ValueError("the file defines nothing: give UserConfig, Cosmos or both")
        return self

    @property
    def namespace(self) -> Namespace:
        return self.user_config.namespaces[0] if self.user_config else Namespace()

    @property
    def containers(self) -> list[CosmosContainer]:
        return self.cosmos.containers if self.cosmos else []

    def summary(self) -> str:
        """What the file adds, in one line."""
        parts = [f"queue {q.name}" for q in self.namespace.queues]
        parts += [
            f"topic {t.name} ({', '.join(s.name for s in t.subscriptions)})"
            for t in self.namespace.topics
        ]
        parts += [f"container {c.database}/{c.id}" for c in self.containers]
        return ", ".join(parts)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2) + "\n"


def _once(names: list[str], what: str, *, fold_case: bool = True) -> None:
    """Service Bus names differ in more than case; Cosmos DB ids are case-sensitive."""
    seen: set[str] = set()
    for name in names:
        folded = name.lower() if fold_case else name
        if folded in seen:
            raise ValueError(f"{what} {name!r} is defined twice")
        seen.add(folded)


def _where(location: tuple[int | str, ...]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "the file"


def load_entities(path: Path) -> LocalEntities:
    """The file at `path`, checked whole; `EntitiesError` names every field at fault."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EntitiesError(f"cannot read the entities file {path}: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EntitiesError(f"the entities file {path} is not JSON: {exc}") from exc
    try:
        return LocalEntities.model_validate(data)
    except ValidationError as exc:
        faults = "; ".join(
            f"{_where(error['loc'])}: {error['msg'].removeprefix('Value error, ')}"
            for error in exc.errors()
        )
        raise EntitiesError(f"the entities file {path}: {faults}") from None


def merged_servicebus_config(app_config: dict[str, Any], entities: LocalEntities) -> dict[str, Any]:
    """The app's emulator config with the user's queues and topics added after its own; a
    name the app already uses (in any case) is an `EntitiesError`, never an override."""
    merged = copy.deepcopy(app_config)
    [namespace] = merged["UserConfig"]["Namespaces"]
    taken = {entity["Name"].lower() for entity in (*namespace["Queues"], *namespace["Topics"])}
    added: dict[str, list[Queue | Topic]] = {
        "Queues": [*entities.namespace.queues],
        "Topics": [*entities.namespace.topics],
    }
    for kind, entities_of_kind in added.items():
        for index, entity in enumerate(entities_of_kind):
            if entity.name.lower() in taken:
                raise EntitiesError(
                    f"UserConfig.Namespaces[0].{kind}[{index}].Name: {entity.name!r} is one of "
                    "the app's own entities on `orders up`; choose another name"
                )
            namespace[kind].append(entity.model_dump(by_alias=True, exclude_none=True))
    if len(namespace["Queues"]) + len(namespace["Topics"]) > MAX_ENTITIES:
        raise EntitiesError(
            f"UserConfig.Namespaces[0]: with the app's own, more than {MAX_ENTITIES} queues and "
            "topics, the most a Service Bus emulator namespace holds"
        )
    return merged


def check_containers(app_containers: set[tuple[str, str]], entities: LocalEntities) -> None:
    """Refuse a container the app already has (same database and id)."""
    for index, container in enumerate(entities.containers):
        if (container.database, container.id) in app_containers:
            raise EntitiesError(
                f"Cosmos.Containers[{index}]: {container.database}/{container.id} is one of "
                "the app's own containers on `orders up`; choose another database or id"
            )
