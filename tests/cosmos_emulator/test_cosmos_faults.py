"""Faults on purpose, observed through the SDK's own retry policies."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey, exceptions
from azure.cosmos.aio import CosmosClient as AioCosmosClient

from cosmos_emulator import RunningCosmosEmulator


@pytest.fixture
def emu_container(fresh_emulator: RunningCosmosEmulator) -> ContainerProxy:
    client = CosmosClient(fresh_emulator.url, fresh_emulator.key)
    return client.create_database("d").create_container("c", PartitionKey("/pk"))


def test_sdk_retries_429_and_then_succeeds(
    fresh_emulator: RunningCosmosEmulator, emu_container: ContainerProxy
) -> None:
    before = fresh_emulator.operation_counts().get("Create", 0)
    fresh_emulator.inject_fault(status=429, count=3, retry_after_ms=5, operation="Create")
    emu_container.create_item({"id": "1", "pk": "a"})
    assert fresh_emulator.operation_counts()["Create"] == before + 4
    assert fresh_emulator.pending_faults() == []
    assert emu_container.read_item("1", "a")["id"] == "1"


def test_429_beyond_the_sdk_retry_budget_surfaces(
    fresh_emulator: RunningCosmosEmulator, emu_container: ContainerProxy
) -> None:
    fresh_emulator.inject_fault(status=429, count=100, retry_after_ms=1, operation="Create")
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        emu_container.create_item({"id": "1", "pk": "a"})
    assert err.value.status_code == 429
    assert err.value.sub_status == 3200
    fresh_emulator.clear_faults()
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        emu_container.read_item("1", "a")


def test_503_is_answered_and_filters_apply(
    fresh_emulator: RunningCosmosEmulator, emu_container: ContainerProxy
) -> None:
    emu_container.create_item({"id": "1", "pk": "a"})
    fresh_emulator.inject_fault(status=503, count=20, method="GET", path_contains="/docs/1/")
    emu_container.create_item({"id": "2", "pk": "a"})  # not matched: a POST
    assert emu_container.read_item("2", "a")["id"] == "2"  # not matched: another path
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        emu_container.read_item("1", "a")
    assert err.value.status_code == 503
    assert fresh_emulator.pending_faults()[0]["hits"] >= 1


def test_delay_only_fault(
    fresh_emulator: RunningCosmosEmulator, emu_container: ContainerProxy
) -> None:
    emu_container.create_item({"id": "1", "pk": "a"})
    fresh_emulator.inject_fault(status=None, count=1, delay_ms=300, operation="Read")
    started = time.monotonic()
    assert emu_container.read_item("1", "a")["id"] == "1"
    assert time.monotonic() - started >= 0.3


def test_admin_endpoint_over_http(
    fresh_emulator: RunningCosmosEmulator, emu_container: ContainerProxy
) -> None:
    url = fresh_emulator.url + "_emulator/faults"
    token = {"Authorization": f"Bearer {fresh_emulator.fault_token}"}
    as_json = {**token, "Content-Type": "application/json"}
    spec = {"status": 429, "count": 2, "retry_after_ms": 5, "operation": "Batch"}
    request = urllib.request.Request(
        url, data=json.dumps(spec).encode(), method="POST", headers=as_json
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.status == 201
        assert json.load(resp)["remaining"] == 2
    with urllib.request.urlopen(urllib.request.Request(url, headers=token), timeout=5) as resp:
        assert len(json.load(resp)["faults"]) == 1
    results = emu_container.execute_item_batch(
        [("create", ({"id": "b", "pk": "a"},))], partition_key="a"
    )
    assert results[0]["statusCode"] == 201
    assert fresh_emulator.operation_counts()["Batch"] == 3
    bad = urllib.request.Request(url, data=b'{"bogus": 1}', method="POST", headers=as_json)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=5)
    assert err.value.code == 400
    fresh_emulator.inject_fault(status=503, count=5)
    clear = urllib.request.Request(url, method="DELETE", headers=token)
    with urllib.request.urlopen(clear, timeout=5) as resp:
        assert resp.status == 204
    assert fresh_emulator.pending_faults() == []


async def test_aio_sdk_retries_429(fresh_emulator: RunningCosmosEmulator) -> None:
    async with AioCosmosClient(fresh_emulator.url, fresh_emulator.key) as client:
        db = await client.create_database("adb")
        container = await db.create_container("c", PartitionKey("/pk"))
        fresh_emulator.inject_fault(status=429, count=2, retry_after_ms=5, operation="Upsert")
        await container.upsert_item({"id": "1", "pk": "a"})
        assert fresh_emulator.pending_faults() == []
        fresh_emulator.inject_fault(status=503, count=50, operation="Read")
        with pytest.raises(exceptions.CosmosHttpResponseError) as err:
            await container.read_item("1", "a")
        assert err.value.status_code == 503
