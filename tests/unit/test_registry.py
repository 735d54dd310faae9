"""The registry of consumers: one entry per consumer, each named, sourced and set apart."""

from __future__ import annotations

import pytest

from orders.service.registry import (
    CONSUMERS,
    app_setting_names,
    consumer_named,
    consumer_names,
    subscription_consumers,
)
from orders.service.subscribers import Source
from orders.settings import APP_SETTING_NAMES, Settings


def test_names_functions_and_settings_are_unique() -> None:
    for field in ("name", "function_name", "setting"):
        values = [getattr(spec, field) for spec in CONSUMERS]
        assert len(values) == len(set(values)), field


def test_a_subscription_is_named_by_its_setting_else_by_the_consumer() -> None:
    shipping = consumer_named("shipping")
    renamed = Settings.from_env({"COSMOS_ENDPOINT": "https://x/", "SHIPPING_SUBSCRIPTION": "eu"})
    plain = Settings(cosmos_endpoint="https://x/")

    assert shipping.source(renamed) == Source(topic="order-events", subscription="eu")
    assert shipping.source(plain) == Source(topic="order-events", subscription="shipping")
    assert consumer_named("billing").source(renamed).subscription == "billing"


def test_the_status_consumer_is_on_its_queue_and_runs_sessions_only_when_asked() -> None:
    status = consumer_named("status")
    sessions = Settings(cosmos_endpoint="https://x/", status_sessions=True)

    assert status not in subscription_consumers()
    assert status.source(sessions) == Source(queue="order-status")
    assert status.runs_sessions(sessions) is True
    assert status.runs_sessions(Settings(cosmos_endpoint="https://x/")) is False
    assert consumer_named("billing").runs_sessions(sessions) is False


def test_every_topic_consumer_adds_its_setting_to_the_deployments() -> None:
    added = app_setting_names() - APP_SETTING_NAMES
    assert added == {f"{spec.name.upper()}_SUBSCRIPTION" for spec in subscription_consumers()}


def test_an_unknown_name_says_which_are_registered() -> None:
    with pytest.raises(KeyError, match="registered: " + ", ".join(consumer_names())):
        consumer_named("bogus")
