"""Settings come from the environment; a missing or malformed one fails at start, clearly."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import cast

import pytest
from azure.cosmos.aio import CosmosClient

from exactly_once.delayed_retries import MAX_RETRIES, DelayedRetries
from orders import bootstrap
from orders.adapters.cosmos_client import Containers
from orders.adapters.cosmos_layout import CosmosLayout
from orders.adapters.monitoring import configure_monitoring
from orders.service.subscribers import Source
from orders.settings import MAX_DELAYED_RETRIES, Settings, SettingsError


def test_defaults_and_emulator_mode() -> None:
    settings = Settings.from_env({"COSMOS_ENDPOINT": "http://127.0.0.1:1/", "COSMOS_KEY": "k"})

    assert settings.cosmos_database == "orders" and settings.cosmos_container == "orders"
    assert settings.cosmos_idempotency_container == "idempotency"
    assert settings.orders_queue == "orders"
    assert settings.uses_emulator_keys
    assert settings.idempotency_ttl_seconds == 24 * 60 * 60


def test_azure_mode_has_no_keys() -> None:
    settings = Settings.from_env(
        {
            "COSMOS_ENDPOINT": "https://acct.documents.azure.com:443/",
            "ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net",
            "AZURE_CLIENT_ID": "client",
        }
    )

    assert not settings.uses_emulator_keys
    settings.require_servicebus()
    assert settings.servicebus_namespace == "ns.servicebus.windows.net"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "COSMOS_ENDPOINT is not set"),
        ({"COSMOS_ENDPOINT": "x", "IDEMPOTENCY_TTL_SECONDS": "soon"}, "must be an integer"),
        ({"COSMOS_ENDPOINT": "x", "IDEMPOTENCY_TTL_SECONDS": "0"}, "must be positive"),
    ],
)
def test_bad_settings_fail_with_a_clear_message(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_the_records_retention_comes_from_the_entities_settings() -> None:
    default = Settings.from_env({"COSMOS_ENDPOINT": "x"})
    deployed = Settings.from_env(
        {
            "COSMOS_ENDPOINT": "x",
            "ORDERS_LOCK_DURATION_SECONDS": "60",
            "ORDERS_MAX_DELIVERY_COUNT": "5",
            "ORDERS_MESSAGE_TTL_SECONDS": "3600",
        }
    )

    # The Bicep's defaults (PT2M x 10 + P14D) and the 7-day margin for resubmitted dead letters.
    assert default.record_ttl_seconds == 120 * 10 + 14 * 86400 + 7 * 86400
    assert deployed.record_ttl_seconds == 60 * 5 + 3600 + 7 * 86400


@pytest.mark.parametrize(
    "env",
    [
        {"ORDERS_LOCK_DURATION_SECONDS": "two minutes"},
        {"ORDERS_MAX_DELIVERY_COUNT": "0"},
        {"ORDERS_MESSAGE_TTL_SECONDS": "-5"},
    ],
)
def test_a_malformed_entity_setting_fails_at_start(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match="must be a positive whole number"):
        Settings.from_env({"COSMOS_ENDPOINT": "x", **env})


def test_delayed_retries_come_from_settings_with_the_cores_defaults() -> None:
    default = Settings.from_env({"COSMOS_ENDPOINT": "x"})
    shortened = Settings.from_env(
        {
            "COSMOS_ENDPOINT": "x",
            "ORDERS_DELAYED_RETRIES": "5",
            "ORDERS_DELAYED_RETRY_SECONDS": "0.5",
        }
    )
    off = Settings.from_env({"COSMOS_ENDPOINT": "x", "ORDERS_DELAYED_RETRIES": "0"})

    # The core's defaults and bound, as numbers (the core's module loads the Service Bus SDK).
    assert (default.delayed_retries, default.delayed_retry_seconds) == (
        DelayedRetries().retries,
        DelayedRetries().delay_seconds,
    )
    assert (shortened.delayed_retries, shortened.delayed_retry_seconds) == (5, 0.5)
    assert off.delayed_retries == 0
    assert MAX_DELAYED_RETRIES == MAX_RETRIES


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ORDERS_DELAYED_RETRIES": "three"}, "ORDERS_DELAYED_RETRIES must be a whole number"),
        ({"ORDERS_DELAYED_RETRIES": "101"}, "ORDERS_DELAYED_RETRIES must be a whole number"),
        ({"ORDERS_DELAYED_RETRIES": "-1"}, "ORDERS_DELAYED_RETRIES must be a whole number"),
        ({"ORDERS_DELAYED_RETRY_SECONDS": "0"}, "ORDERS_DELAYED_RETRY_SECONDS must be seconds"),
        ({"ORDERS_DELAYED_RETRY_SECONDS": "nan"}, "ORDERS_DELAYED_RETRY_SECONDS must be seconds"),
        ({"ORDERS_DELAYED_RETRY_SECONDS": "1e9"}, "ORDERS_DELAYED_RETRY_SECONDS must be seconds"),
        ({"ORDERS_DELAYED_RETRY_SECONDS": "soon"}, "ORDERS_DELAYED_RETRY_SECONDS must be seconds"),
    ],
)
def test_a_malformed_delayed_retry_setting_fails_at_start(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({"COSMOS_ENDPOINT": "x", **env})


def test_servicebus_is_required_where_used() -> None:
    settings = Settings.from_env({"COSMOS_ENDPOINT": "x"})

    with pytest.raises(SettingsError, match="ServiceBusConnection"):
        settings.require_servicebus()


@pytest.mark.parametrize("value", [None, "", "  "])
def test_the_payment_service_url_is_required_only_where_charges_are_made(
    value: str | None,
) -> None:
    env = {"COSMOS_ENDPOINT": "x"} | ({} if value is None else {"PAYMENTS_URL": value})
    settings = Settings.from_env(env)

    assert settings.payments_url is None
    with pytest.raises(SettingsError, match="PAYMENTS_URL is not set"):
        settings.require_payments()
    configured = Settings.from_env({"COSMOS_ENDPOINT": "x", "PAYMENTS_URL": " http://p:8090 "})
    assert configured.require_payments() == "http://p:8090"


def test_monitoring_is_off_without_a_connection_string() -> None:
    assert configure_monitoring(Settings.from_env({"COSMOS_ENDPOINT": "x"})) is False


async def test_azure_mode_clients_share_the_process_credential_and_close_it() -> None:
    from orders.adapters.cosmos_client import create_cosmos_client
    from orders.adapters.identity import ProcessCredential
    from orders.adapters.servicebus import create_servicebus_client

    settings = Settings.from_env(
        {
            "COSMOS_ENDPOINT": "https://acct.documents.azure.com:443/",
            "ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net",
        }
    )
    with pytest.raises(ValueError, match="ProcessCredential"):
        create_cosmos_client(settings)
    identity = ProcessCredential(settings)

    servicebus = create_servicebus_client(settings, identity)
    assert identity.get() is identity.get()  # one credential per process
    await servicebus.close()
    await identity.close()


@pytest.mark.parametrize(
    ("value", "trusted"), [("true", True), ("True", True), ("false", False), ("", False)]
)
def test_the_principal_header_is_trusted_only_with_platform_authentication(
    value: str, trusted: bool
) -> None:
    env = {"COSMOS_ENDPOINT": "http://127.0.0.1:1/", "WEBSITE_AUTH_ENABLED": value}

    assert Settings.from_env(env).platform_auth_enabled is trusted


def test_a_worker_source_is_a_queue_or_a_subscription_of_a_topic() -> None:
    assert str(Source(queue="orders")) == "orders"
    assert str(Source(topic="events", subscription="billing")) == "events/Subscriptions/billing"
    for half_done in ({}, {"topic": "events"}, {"queue": "q", "topic": "t", "subscription": "s"}):
        with pytest.raises(ValueError, match="a source is a queue"):
            Source(**half_done)


async def test_the_consumers_lay_their_records_out_with_the_settings_retention() -> None:
    """The composition root hands every consumer a layout whose records carry the ttl the
    settings derive from the entities' values (the one line that joins the two)."""
    settings = Settings.from_env({"COSMOS_ENDPOINT": "x", "ORDERS_MAX_DELIVERY_COUNT": "3"})
    async with AsyncExitStack() as stack:
        clients = bootstrap.ProcessClients(settings)
        containers = Containers(cast(CosmosClient, None), settings)
        wiring = bootstrap._Wiring(stack, clients, containers, None, None)
        layout = wiring.layout

    assert isinstance(layout, CosmosLayout)
    assert layout.record_ttl_seconds == settings.record_ttl_seconds == 120 * 3 + 21 * 86400


def test_orders_worker_takes_its_delayed_retries_from_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`orders worker` (and `orders up`'s workers, which run it) shortens its delayed retries
    by settings, as the Functions consumers do: what a test or an operator sets is what runs."""
    from typer.testing import CliRunner

    import orders.cli
    from exactly_once.worker import WorkerOptions
    from orders.cli import app
    from orders.entrypoints import worker

    ran: list[WorkerOptions] = []
    monkeypatch.setattr(
        worker, "run_until_signalled", lambda settings, options, **_: ran.append(options)
    )
    # No stack here: the check of what the worker needs (tests/integration/test_cli_mistakes.py)
    # is not what this test is about.
    monkeypatch.setattr(orders.cli, "require_ready", lambda *_, **__: None)
    result = CliRunner().invoke(
        app,
        ["worker"],
        env={
            "COSMOS_ENDPOINT": "http://127.0.0.1:1",
            "ServiceBusConnection": "Endpoint=sb://127.0.0.1:1;UseDevelopmentEmulator=true;",
            "ORDERS_DELAYED_RETRIES": "2",
            "ORDERS_DELAYED_RETRY_SECONDS": "1.5",
        },
    )

    assert result.exit_code == 0, result.output
    [options] = ran
    assert options.delayed_retries == DelayedRetries(retries=2, delay_seconds=1.5)
