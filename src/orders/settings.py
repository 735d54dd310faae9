"""One frozen settings object built from the environment (app settings in Azure).

Emulators differ from Azure in settings only, never in code paths: a connection string and
`COSMOS_KEY` locally, a namespace and Entra ID (managed identity) in Azure.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from exactly_once import Retention, RetentionError
from orders.exceptions import OrdersError

# Every setting the Azure deployment (infra/) sets: tests/infra checks the Bicep sets exactly these.
# The `ServiceBusConnection__*` trio is read by the Functions host for the trigger, and by our
# own Service Bus client factory (worker, HTTP API) through the namespace name.
APP_SETTING_NAMES = frozenset(
    {
        "ServiceBusConnection__fullyQualifiedNamespace",
        "ServiceBusConnection__credential",
        "ServiceBusConnection__clientId",
        "ORDERS_QUEUE",
        "COSMOS_ENDPOINT",
        "COSMOS_DATABASE",
        "COSMOS_CONTAINER",
        "COSMOS_IDEMPOTENCY_CONTAINER",
        "AZURE_CLIENT_ID",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
        # The payment service billing charges through (issue 13); empty until one is configured.
        "PAYMENTS_URL",
        # Fan-out (issue 13): the events topic, the consumers' inbox and the dispatcher's leases
        # (each subscription's `<NAME>_SUBSCRIPTION` comes from the consumer registry:
        # `orders.service.registry.app_setting_names()`); status updates (issue 14): the queue
        # and its mode.
        "ORDER_EVENTS_TOPIC",
        "STATUS_QUEUE",
        "STATUS_SESSIONS",
        "COSMOS_INBOX_CONTAINER",
        "COSMOS_LEASES_CONTAINER",
        # The Cosmos DB trigger's connection `CosmosConnection` (the outbox dispatcher in Azure):
        # read by the Functions host only, never by our code, which uses COSMOS_ENDPOINT.
        "CosmosConnection__accountEndpoint",
        "CosmosConnection__credential",
        "CosmosConnection__clientId",
        # The broker's duplicate-detection window in seconds (issue 23): the Bicep derives it
        # from the same parameter it gives the entities, so the tools never assume a default.
        "ORDERS_DUPLICATE_WINDOW_SECONDS",
        # The entities' lock duration, MaxDeliveryCount and message TTL (issue 34), from the same
        # values the Bicep gives them: the exactly-once records outlive every redelivery.
        "ORDERS_LOCK_DURATION_SECONDS",
        "ORDERS_MAX_DELIVERY_COUNT",
        "ORDERS_MESSAGE_TTL_SECONDS",
        # When billing and shipping stop taking an event under its bare eventId (issue 46): an
        # ISO 8601 time with its offset, empty until the operator sets it (docs/operations.md).
        "BARE_EVENT_ID_CUTOVER",
        # Delayed retries (issue 43): how many scheduled copies a message whose in-place backoff
        # was spent gets, and the delay unit between them (retry n comes n units later).
        "ORDERS_DELAYED_RETRIES",
        "ORDERS_DELAYED_RETRY_SECONDS",
    }
)
# Only for the emulators: keys and connection strings never appear in the Azure deployment.
# The Cosmos DB emulators' published, well-known key (the official ones and ours accept it).
EMULATOR_COSMOS_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
)
# `CosmosConnection` (an emulator connection string) is read by the Functions host's Cosmos DB
# trigger under `func start`; in Azure its identity-based `CosmosConnection__*` form is set.
# `PAYMENTS_TOKEN` is what the payment stand-in's money routes ask for (`orders up` draws it).
EMULATOR_ONLY_SETTING_NAMES = frozenset(
    {"ServiceBusConnection", "COSMOS_KEY", "CosmosConnection", "PAYMENTS_TOKEN"}
)
# Optional tuning with defaults in code.
OPTIONAL_SETTING_NAMES = frozenset(
    {
        "IDEMPOTENCY_SCOPE",
        "IDEMPOTENCY_TTL_SECONDS",
        "BILLING_LEASE_SECONDS",
        # The operations console (off unless "true"; see docs/operations.md before turning it
        # on in Azure) and the subscriptions it shows beside the orders queue ("topic/sub,...").
        "ORDERS_CONSOLE_ENABLED",
        "ORDERS_CONSOLE_SUBSCRIPTIONS",
    }
)
# Read by local tooling only: the folder of the workers' decision journals (`orders up`).
# ORDERS_ALLOWED_HOSTS: the host names (`name` or `name:port`, comma-separated) the local HTTP
# servers answer for besides their own address, localhost and 127.0.0.1 (a container's name).
LOCAL_SETTING_NAMES = frozenset({"ORDERS_DECISIONS_DIR", "ORDERS_ALLOWED_HOSTS"})
CONSOLE_ENABLED = "ORDERS_CONSOLE_ENABLED"
# A consumer's subscription of the events topic is named by `<NAME>_SUBSCRIPTION`.
SUBSCRIPTION_SUFFIX = "_SUBSCRIPTION"

DEFAULT_IDEMPOTENCY_TTL_SECONDS = 24 * 60 * 60
# The most delayed retries a setting may ask for (`exactly_once.delayed_retries.MAX_RETRIES`).
MAX_DELAYED_RETRIES = 100
# Azure's default for a queue's duplicate-detection history (ARM's PT10M).
DEFAULT_DUPLICATE_WINDOW_SECONDS = 10 * 60
# What infra/modules/messaging.bicep gives every entity by default (lockDuration PT2M,
# maxDeliveryCount 10, defaultMessageTimeToLive P14D): the records' retention without settings.
DEFAULT_RECORD_RETENTION = Retention(
    lock_duration_seconds=120, max_delivery_count=10, message_ttl_seconds=14 * 24 * 60 * 60
)


class SettingsError(OrdersError, ValueError):
    """A required setting is missing or malformed."""


@dataclass(frozen=True)
class MonitoringSettings:
    """What telemetry export needs, and nothing else: read at import of function_app.py, before
    (and whether or not) the other settings are complete."""

    appinsights_connection_string: str | None = None
    appinsights_authentication_string: str | None = None
    azure_client_id: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MonitoringSettings:
        env = os.environ if env is None else env

        def optional(name: str) -> str | None:
            return env.get(name, "").strip() or None

        return cls(
            appinsights_connection_string=optional("APPLICATIONINSIGHTS_CONNECTION_STRING"),
            appinsights_authentication_string=optional("APPLICATIONINSIGHTS_AUTHENTICATION_STRING"),
            azure_client_id=optional("AZURE_CLIENT_ID"),
        )


@dataclass(frozen=True)
class Settings:
    cosmos_endpoint: str
    cosmos_key: str | None = None
    cosmos_database: str = "orders"
    cosmos_container: str = "orders"
    cosmos_idempotency_container: str = "idempotency"
    # Fan-out: the consumers' inbox records and effects, and the dispatcher's checkpoints.
    cosmos_inbox_container: str = "inbox"
    cosmos_leases_container: str = "leases"
    order_events_topic: str = "order-events"
    # The `<NAME>_SUBSCRIPTION` settings that are set, as (setting, subscription) pairs: which
    # consumers exist is the registry's (orders.service.registry), not the settings'.
    subscriptions: tuple[tuple[str, str], ...] = ()
    # Status updates: a plain queue (versions decide) or a session queue (SessionId = orderId).
    status_queue: str = "order-status"
    status_sessions: bool = False
    orders_queue: str = "orders"
    servicebus_connection_string: str | None = None
    servicebus_namespace: str | None = None
    azure_client_id: str | None = None
    appinsights_connection_string: str | None = None
    appinsights_authentication_string: str | None = None
    idempotency_scope: str = "default"
    idempotency_ttl_seconds: int = DEFAULT_IDEMPOTENCY_TTL_SECONDS
    # App Service sets WEBSITE_AUTH_ENABLED when its authentication is on; only then does the
    # platform own X-MS-CLIENT-PRINCIPAL-ID (it strips what a client sends and sets its own).
    platform_auth_enabled: bool = False
    # Base URL of the payment service (`POST /payments` with Idempotency-Key); locally the
    # stand-in `orders payments` serves it.
    payments_url: str | None = None
    # Sent as `Authorization: Bearer` to the payment service: the stand-in's money token, which
    # `orders up` draws and hands over (a web page or a local process without it moves no money).
    payments_token: str | None = None
    # How long a billing record's owner may take before another delivery takes over (by the
    # database's clock); it must outlast the payment call's timeout.
    billing_lease_seconds: float = 60.0
    payments_timeout_seconds: float = 10.0
    console_enabled: bool = False
    console_subscriptions: tuple[tuple[str, str], ...] = ()
    duplicate_window_seconds: int = DEFAULT_DUPLICATE_WINDOW_SECONDS
    # How long the consumers' exactly-once records (shipping's inbox records, billing's charge
    # and refund records) are kept: their ttl, past every redelivery of their message.
    record_retention: Retention = DEFAULT_RECORD_RETENTION
    # What becomes of a message once its in-place backoff is spent (every consumer, both hosts):
    # this many scheduled copies, retry n after n x the seconds, then a `RetriesExhausted` dead
    # letter (`exactly_once.DelayedRetries`, whose defaults these are; numbers here, as the core's
    # module loads the Service Bus SDK, which the command line does not).
    delayed_retries: int = 3
    delayed_retry_seconds: float = 60.0
    decisions_folder: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    # From when billing and shipping refuse an event under its bare eventId (published before
    # the nonce): `BARE_EVENT_ID_CUTOVER`; None accepts it (domain/events.BareEventIdCutover).
    bare_event_id_cutover: datetime | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def optional(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        endpoint = optional("COSMOS_ENDPOINT")
        if endpoint is None:
            raise SettingsError("COSMOS_ENDPOINT is not set (the Cosmos DB account endpoint)")
        ttl_text = optional("IDEMPOTENCY_TTL_SECONDS") or str(DEFAULT_IDEMPOTENCY_TTL_SECONDS)
        try:
            ttl = int(ttl_text)
        except ValueError as exc:
            raise SettingsError(
                f"IDEMPOTENCY_TTL_SECONDS must be an integer: {ttl_text!r}"
            ) from exc
        if ttl <= 0:
            raise SettingsError("IDEMPOTENCY_TTL_SECONDS must be positive")
        lease_text = optional("BILLING_LEASE_SECONDS") or "60"
        try:
            billing_lease = float(lease_text)
        except ValueError as exc:
            raise SettingsError(f"BILLING_LEASE_SECONDS must be a number: {lease_text!r}") from exc
        if not 1 <= billing_lease <= 3600:
            raise SettingsError("BILLING_LEASE_SECONDS must be between 1 and 3600")
        window_text = optional("ORDERS_DUPLICATE_WINDOW_SECONDS")
        window = DEFAULT_DUPLICATE_WINDOW_SECONDS
        if window_text is not None:
            if not (window_text.isascii() and window_text.isdigit()) or len(window_text) > 9:
                raise SettingsError(
                    f"ORDERS_DUPLICATE_WINDOW_SECONDS must be whole seconds: {window_text!r}"
                )
            window = int(window_text)
        # The field defaults above are the one source of defaults: unset names are left out.
        named = {
            field: value
            for field, value in (
                ("cosmos_database", optional("COSMOS_DATABASE")),
                ("cosmos_container", optional("COSMOS_CONTAINER")),
                ("cosmos_idempotency_container", optional("COSMOS_IDEMPOTENCY_CONTAINER")),
                ("orders_queue", optional("ORDERS_QUEUE")),
                ("cosmos_inbox_container", optional("COSMOS_INBOX_CONTAINER")),
                ("cosmos_leases_container", optional("COSMOS_LEASES_CONTAINER")),
                ("order_events_topic", optional("ORDER_EVENTS_TOPIC")),
                ("status_queue", optional("STATUS_QUEUE")),
                ("idempotency_scope", optional("IDEMPOTENCY_SCOPE")),
            )
            if value is not None
        }
        retries, retry_seconds = delayed_retries(optional)
        return cls(
            cosmos_endpoint=endpoint,
            delayed_retries=retries,
            delayed_retry_seconds=retry_seconds,
            cosmos_key=optional("COSMOS_KEY"),
            platform_auth_enabled=(optional("WEBSITE_AUTH_ENABLED") or "").lower() == "true",
            status_sessions=status_sessions_enabled(env),
            servicebus_connection_string=optional("ServiceBusConnection"),
            servicebus_namespace=optional("ServiceBusConnection__fullyQualifiedNamespace"),
            azure_client_id=optional("AZURE_CLIENT_ID"),
            appinsights_connection_string=optional("APPLICATIONINSIGHTS_CONNECTION_STRING"),
            appinsights_authentication_string=optional("APPLICATIONINSIGHTS_AUTHENTICATION_STRING"),
            payments_url=optional("PAYMENTS_URL"),
            payments_token=optional("PAYMENTS_TOKEN"),
            billing_lease_seconds=billing_lease,
            payments_timeout_seconds=min(10.0, billing_lease / 2),
            idempotency_ttl_seconds=ttl,
            console_enabled=console_enabled(env),
            subscriptions=tuple(
                sorted(
                    (name, value.strip())
                    for name, value in env.items()
                    if name.endswith(SUBSCRIPTION_SUFFIX) and value.strip()
                )
            ),
            console_subscriptions=parse_subscriptions(optional("ORDERS_CONSOLE_SUBSCRIPTIONS")),
            duplicate_window_seconds=window,
            record_retention=record_retention(optional),
            decisions_folder=optional("ORDERS_DECISIONS_DIR"),
            bare_event_id_cutover=cutover_time(optional("BARE_EVENT_ID_CUTOVER")),
            allowed_hosts=tuple(
                entry.strip()
                for entry in (optional("ORDERS_ALLOWED_HOSTS") or "").split(",")
                if entry.strip()
            ),
            **named,
        )

    @property
    def record_ttl_seconds(self) -> int:
        """The ttl of every exactly-once record the consumers write."""
        return self.record_retention.ttl_seconds

    @property
    def monitoring(self) -> MonitoringSettings:
        return MonitoringSettings(
            self.appinsights_connection_string,
            self.appinsights_authentication_string,
            self.azure_client_id,
        )

    def subscription(self, setting: str, default: str) -> str:
        """The subscription `setting` (`<NAME>_SUBSCRIPTION`) names, else `default`."""
        return dict(self.subscriptions).get(setting, default)

    @property
    def uses_emulator_keys(self) -> bool:
        return self.cosmos_key is not None

    def require_payments(self) -> str:
        """The payment service's URL, for the hosts that charge; a clear error without it."""
        if self.payments_url is None:
            raise SettingsError(
                "PAYMENTS_URL is not set (the payment service's base URL; locally the URL "
                "`orders payments` prints)"
            )
        return self.payments_url

    def require_servicebus(self) -> None:
        if not (self.servicebus_connection_string or self.servicebus_namespace):
            raise SettingsError(
                "set ServiceBusConnection (emulator connection string) or "
                "ServiceBusConnection__fullyQualifiedNamespace (Azure, managed identity)"
            )


def console_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether ORDERS_CONSOLE_ENABLED is "true" (read alone too: the app decides at import)."""
    env = os.environ if env is None else env
    return env.get(CONSOLE_ENABLED, "").strip().lower() == "true"


def status_sessions_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether STATUS_SESSIONS is "true": the status queue is the session one. Read alone too:
    function_app.py declares the status trigger's binding from it at import."""
    env = os.environ if env is None else env
    return env.get("STATUS_SESSIONS", "").strip().lower() == "true"


def parse_subscriptions(text: str | None) -> tuple[tuple[str, str], ...]:
    """Pairs from "topic/subscription,topic/subscription" (blank items skipped)."""
    pairs = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        topic, slash, subscription = item.strip().partition("/")
        if not (slash and topic.strip() and subscription.strip()) or "/" in subscription:
            raise SettingsError(
                f"ORDERS_CONSOLE_SUBSCRIPTIONS: {item.strip()!r} is not topic/subscription"
            )
        pairs.append((topic.strip(), subscription.strip()))
    return tuple(pairs)


def _positive_whole(name: str, text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) == 0:
        raise SettingsError(f"{name} must be a positive whole number: {text!r}")
    return int(text)


def cutover_time(text: str | None) -> datetime | None:
    """`BARE_EVENT_ID_CUTOVER`: an ISO 8601 time with its UTC offset (`2026-12-31T00:00:00Z`),
    or None when unset. A time without an offset would mean another instant on every host."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise SettingsError(
            f"BARE_EVENT_ID_CUTOVER must be an ISO 8601 time such as 2026-12-31T00:00:00Z: {text!r}"
        ) from exc
    if when.tzinfo is None or when.utcoffset() is None:
        raise SettingsError(f"BARE_EVENT_ID_CUTOVER needs its UTC offset (Z or +01:00): {text!r}")
    return when


def record_retention(optional: Callable[[str], str | None]) -> Retention:
    """The records' retention from the entities' settings, each defaulting to the Bicep's; a
    malformed value or a window no ttl covers is a `SettingsError` at start-up."""
    default = DEFAULT_RECORD_RETENTION
    values = {
        field: _positive_whole(name, text)
        for field, name in (
            ("lock_duration_seconds", "ORDERS_LOCK_DURATION_SECONDS"),
            ("max_delivery_count", "ORDERS_MAX_DELIVERY_COUNT"),
            ("message_ttl_seconds", "ORDERS_MESSAGE_TTL_SECONDS"),
        )
        if (text := optional(name)) is not None
    }
    try:
        return Retention(
            lock_duration_seconds=values.get(
                "lock_duration_seconds", default.lock_duration_seconds
            ),
            max_delivery_count=values.get("max_delivery_count", default.max_delivery_count),
            message_ttl_seconds=values.get("message_ttl_seconds", default.message_ttl_seconds),
        )
    except RetentionError as exc:
        raise SettingsError(str(exc)) from exc


def delayed_retries(optional: Callable[[str], str | None]) -> tuple[int, float]:
    """The consumers' delayed retries, (how many, the delay unit in seconds), from
    ORDERS_DELAYED_RETRIES (0 to 100; 0 turns them off) and ORDERS_DELAYED_RETRY_SECONDS
    (above 0, at most a day), each defaulting to the `Settings` field's; a malformed value is
    a `SettingsError` at start-up."""
    retries, seconds = Settings.delayed_retries, Settings.delayed_retry_seconds
    if (text := optional("ORDERS_DELAYED_RETRIES")) is not None:
        digits = text.isascii() and text.isdigit() and len(text) <= 3
        if not digits or int(text) > MAX_DELAYED_RETRIES:
            raise SettingsError(
                "ORDERS_DELAYED_RETRIES must be a whole number from 0 to "
                f"{MAX_DELAYED_RETRIES}: {text!r}"
            )
        retries = int(text)
    if (text := optional("ORDERS_DELAYED_RETRY_SECONDS")) is not None:
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not 0 < seconds <= 24 * 60 * 60:
            raise SettingsError(
                f"ORDERS_DELAYED_RETRY_SECONDS must be seconds above 0, at most a day: {text!r}"
            )
    return retries, seconds
