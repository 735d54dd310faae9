"""The app writes its documents through one port, the `exactly_once` core's (issue 35).

The order consumer, shipping, status and the saga take the core's `DocumentCreator` /
`DocumentStore` itself: no app port of the same job beside it, no adapter of the core's port
over an app port (a conflict then changed form at each hop, from the SDK's 409 to the
decision), and no second translation of a failed batch beside the core's (`CosmosStore`).
"""

from __future__ import annotations

import importlib
import importlib.util
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

import exactly_once.cosmos
from exactly_once._ports import DocumentCreator, DocumentStore
from orders.service import ports
from orders.service.consumer import OrderConsumer
from orders.service.saga import OrderSaga
from orders.service.shipping import ShippingConsumer
from orders.service.status import StatusConsumer

# The app's document ports and adapters that the core's port replaced.
REPLACED_PORTS = ("OrderStore", "FencedBatches", "InboxStore", "OrderDocuments", "FencedDocuments")
REPLACED_MODULES = (
    "orders.adapters.cosmos_store",
    "orders.service.core_documents",
    "orders.adapters.cosmos_fenced",
    "orders.adapters.cosmos_errors",
    "orders.domain.leases",  # the app's stamped document and read with the database's clock
)
APP_SOURCE = Path(__file__).resolve().parents[2] / "src" / "orders"
# What running and translating a transactional batch takes: the core's `CosmosStore` is the one.
BATCH_NAMES = (
    "execute_item_batch",
    "failed_operation",
    "BATCH_ERRORS",
    "CosmosBatchOperationError",
)


@pytest.mark.parametrize(
    ("constructor", "parameter", "port"),
    [
        (OrderConsumer.__init__, "documents", DocumentCreator),
        (ShippingConsumer.__init__, "inbox", DocumentStore),
        (StatusConsumer.__init__, "documents", DocumentStore),
        (OrderSaga.__init__, "orders", DocumentStore),
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


def test_the_app_runs_and_translates_no_batch_of_its_own() -> None:
    """A batch's 409 (and 412) is translated once, by the core: no app module sends a batch."""
    found = [
        f"{path.relative_to(APP_SOURCE)}: {name}"
        for path in sorted(APP_SOURCE.rglob("*.py"))
        for name in BATCH_NAMES
        if name in path.read_text(encoding="utf-8")
    ]
    assert found == []


def test_the_batch_check_looks_for_what_the_cores_batch_uses() -> None:
    """The check above would pass on misspelt names, or on no files at all."""
    core = Path(exactly_once.cosmos.__file__).read_text(encoding="utf-8")
    assert [name for name in BATCH_NAMES if name not in core] == []
    assert (APP_SOURCE / "adapters" / "cosmos_client.py").is_file()
