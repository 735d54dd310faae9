"""The consumers write their documents through one port, the `exactly_once` core's (issue 35).

The order consumer, shipping and status take the core's `DocumentCreator` / `DocumentStore`
itself: no app port of the same job beside it, and no adapter of the core's port over an app
port (a conflict then changed form at each hop, from the SDK's 409 to the decision).
"""

from __future__ import annotations

import importlib
import importlib.util
import typing
from collections.abc import Callable

import pytest

from exactly_once.ports import DocumentCreator, DocumentStore
from orders.service import ports
from orders.service.consumer import OrderConsumer
from orders.service.shipping import ShippingConsumer
from orders.service.status import StatusConsumer

# The app's document ports and adapters that the core's port replaced.
REPLACED_PORTS = ("OrderStore", "FencedBatches", "InboxStore")
REPLACED_MODULES = ("orders.adapters.cosmos_store", "orders.service.core_documents")


@pytest.mark.parametrize(
    ("constructor", "parameter", "port"),
    [
        (OrderConsumer.__init__, "documents", DocumentCreator),
        (ShippingConsumer.__init__, "inbox", DocumentStore),
        (StatusConsumer.__init__, "documents", DocumentStore),
    ],
)
def test_each_consumer_writes_through_the_cores_document_port(
    constructor: Callable[..., None], parameter: str, port: type
) -> None:
    assert typing.get_type_hints(constructor)[parameter] is port


def test_the_app_declares_no_document_port_of_its_own_beside_the_cores() -> None:
    assert [name for name in REPLACED_PORTS if hasattr(ports, name)] == []


def test_no_adapter_translates_the_cores_port_into_the_apps() -> None:
    assert [name for name in REPLACED_MODULES if importlib.util.find_spec(name)] == []
