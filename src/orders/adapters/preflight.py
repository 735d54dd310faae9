"""Before an operator's command starts: do the database, the containers and the Service Bus
entities its settings name exist, and do they take its credentials?

The answer is one line that names what is wrong, the setting that names it and what to do, or
None. The CLI prints it instead of the SDK's traceback (`orders.cli.shared.require_ready`). Each
check is the cheapest request that can tell: a read of the database's and each container's
properties (metadata a data-plane role may read), a sender's link to a queue or topic, a peek
on a subscription. Every check is bounded by `CHECK_TIMEOUT_SECONDS`: a wrong endpoint that
accepts the connection and never answers is reported, not waited on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.cosmos import exceptions as cosmos_errors
from azure.servicebus import ServiceBusSubQueue
from azure.servicebus.exceptions import (
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)

from orders.adapters.process_clients import ProcessClients
from orders.service.registry import CONSUMERS
from orders.service.subscribers import Source
from orders.settings import Settings

CHECK_TIMEOUT_SECONDS = 10.0
# What to do about a database, container or entity that is not there.
LOCAL_FIX = "`orders up` creates it locally; in Azure `azd provision` does"


@dataclass(frozen=True)
class Needed:
    """One thing a command uses, with the setting that names it."""

    kind: str  # "container", "queue", "topic" or "subscription"
    setting: str
    name: str
    topic: str | None = None  # a subscription's topic
    # A queue the command sends to is checked by a sender's link; one it reads, by a peek on
    # its dead-letter queue: that needs only the receive right an operator's identity may
    # have, and a dead-letter queue has no sessions, so it is peeked on a session queue too.
    sends: bool = False

    def described(self) -> str:
        if self.kind == "subscription":
            return f"subscription '{self.name}' of topic '{self.topic}' ({self.setting})"
        return f"{self.kind} '{self.name}' ({self.setting})"


def containers(settings: Settings, *settings_names: str) -> list[Needed]:
    """The containers the settings `settings_names` (COSMOS_CONTAINER, ...) name."""
    by_setting = {
        "COSMOS_CONTAINER": settings.cosmos_container,
        "COSMOS_IDEMPOTENCY_CONTAINER": settings.cosmos_idempotency_container,
        "COSMOS_INBOX_CONTAINER": settings.cosmos_inbox_container,
        "COSMOS_LEASES_CONTAINER": settings.cosmos_leases_container,
    }
    return [Needed("container", name, by_setting[name]) for name in settings_names]


def queue(setting: str, name: str, *, sends: bool = False) -> Needed:
    return Needed("queue", setting, name, sends=sends)


def topic(setting: str, name: str) -> Needed:
    return Needed("topic", setting, name, sends=True)


def subscription(setting: str, topic_name: str, name: str) -> Needed:
    return Needed("subscription", setting, name, topic_name)


def entity(where: Source, setting: str) -> Needed:
    """A worker's or a tool's source (a queue, or a topic's subscription) as a need."""
    if where.queue is not None:
        return queue(setting, where.queue)
    assert where.topic is not None and where.subscription is not None
    return subscription(setting, where.topic, where.subscription)


def consumer_entities(settings: Settings) -> list[Needed]:
    """Every registered consumer's entity (what `orders show` peeks the dead letters of)."""
    return [entity(spec.source(settings), spec.setting) for spec in CONSUMERS]


def _short(exc: BaseException) -> str:
    """An SDK error as one short line (their messages run to many)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}"


async def _bounded(check: Awaitable[str | None], what: str) -> str | None:
    try:
        return await asyncio.wait_for(check, CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        return (
            f"{what} did not answer within {CHECK_TIMEOUT_SECONDS:.0f} s: does the setting "
            "name that service's endpoint?"
        )


async def cosmos_problem(
    clients: ProcessClients, needed: Sequence[Needed], *, create_local: bool = False
) -> str | None:
    """What is wrong with the Cosmos DB account, database or containers `needed`, or None.
    `create_local`: a host on an emulator's key creates its database and containers first, as
    it would on first use (`ProcessClients.cosmos`)."""
    settings = clients.settings
    endpoint = settings.cosmos_endpoint
    where = f"Cosmos DB at {endpoint} (COSMOS_ENDPOINT)"

    async def check() -> str | None:
        client = await clients.cosmos(create_local_resources=create_local)
        database = client.get_database_client(settings.cosmos_database)
        try:
            await database.read()
        except cosmos_errors.CosmosResourceNotFoundError:
            return (
                f"{where} has no database '{settings.cosmos_database}' (COSMOS_DATABASE): "
                f"{LOCAL_FIX}, or fix the setting"
            )
        for container in needed:
            try:
                await database.get_container_client(container.name).read()
            except cosmos_errors.CosmosResourceNotFoundError:
                return (
                    f"{where}: database '{settings.cosmos_database}' has no "
                    f"{container.described()}: {LOCAL_FIX}, or fix the setting"
                )
        return None

    try:
        return await _bounded(check(), where)
    except cosmos_errors.CosmosHttpResponseError as exc:
        if exc.status_code == 401:
            credential = (
                "COSMOS_KEY is not this account's key"
                if settings.cosmos_key
                else "the identity's token was refused"
            )
            return f"{where} refused the credentials (401): {credential}"
        if exc.status_code == 403:
            return (
                f"{where} forbids this identity (403): give it the Cosmos DB Built-in Data "
                "Contributor role (infra/ does for the app's identity)"
            )
        return f"{where} answered {exc.status_code}: {_short(exc)}"
    except ClientAuthenticationError as exc:  # no key: Entra ID found no identity to sign in
        return (
            f"{where}: no identity could sign in ({_short(exc)}): `az login`, or set "
            "COSMOS_KEY for an emulator"
        )
    except (AzureError, OSError, ValueError) as exc:
        # Not an account's answer: an endpoint of something else, TLS against plain HTTP, ...
        scheme = urlsplit(endpoint).scheme
        hint = (
            " (the local emulators speak http://)" if scheme == "https" else ""
        ) + ": is it the account's endpoint?"
        return f"{where} does not answer as Cosmos DB ({_short(exc)}){hint}"


async def servicebus_problem(clients: ProcessClients, needed: Sequence[Needed]) -> str | None:
    """What is wrong with the Service Bus connection or the entities `needed`, or None."""
    where = "Service Bus (ServiceBusConnection)"
    try:
        client = clients.servicebus()
    except ValueError as exc:
        return (
            f"ServiceBusConnection is not a Service Bus connection string ({exc}): copy it "
            'from `orders env` (locally) or the namespace\'s "Shared access policies"'
        )

    async def open_link(entity: Needed) -> str | None:
        if entity.sends:
            sender = (
                client.get_queue_sender(entity.name)
                if entity.kind == "queue"
                else client.get_topic_sender(entity.name)
            )
            async with sender:
                return None
        receiver = (
            client.get_subscription_receiver(
                entity.topic or "", entity.name, sub_queue=ServiceBusSubQueue.DEAD_LETTER
            )
            if entity.kind == "subscription"
            else client.get_queue_receiver(entity.name, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        )
        async with receiver:
            await receiver.peek_messages(max_message_count=1)
        return None

    async def check(entity: Needed) -> str | None:
        try:
            return await _bounded(open_link(entity), where)
        except MessagingEntityNotFoundError:
            return f"{where} has no {entity.described()}: {LOCAL_FIX}, or fix the setting"
        except (
            ServiceBusAuthenticationError,
            ServiceBusAuthorizationError,
            ClientAuthenticationError,
        ) as exc:
            return (
                f"{where} refused the credentials ({_short(exc)}): check the connection "
                "string's key, or the identity's Service Bus Data roles"
            )
        except (ServiceBusError, AzureError, OSError) as exc:
            return (
                f"{where} does not answer as Service Bus ({_short(exc)}): is its Endpoint "
                "the namespace?"
            )

    # All at once: each link's open and close is a few round trips of waiting.
    found = await asyncio.gather(*(check(entity) for entity in needed))
    return next((problem for problem in found if problem is not None), None)


async def problem(
    settings: Settings,
    cosmos: Sequence[Needed] | None,
    servicebus: Sequence[Needed] | None,
    *,
    create_local: bool = False,
) -> str | None:
    """The first thing wrong with what a command needs: Cosmos DB when `cosmos` is not None
    (the database, and the containers listed), Service Bus when `servicebus` is not None."""
    clients = ProcessClients(settings)
    # The SDKs log each failed attempt as a warning: the one line this returns says it all.
    azure_logs = logging.getLogger("azure")
    level = azure_logs.level
    azure_logs.setLevel(logging.ERROR)
    try:
        if cosmos is not None:
            found = await cosmos_problem(clients, cosmos, create_local=create_local)
            if found is not None:
                return found
        if servicebus is not None:
            return await servicebus_problem(clients, servicebus)
        return None
    finally:
        await clients.close()
        azure_logs.setLevel(level)
