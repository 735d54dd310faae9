"""Throughput offers, unsupported features named in a 400, minimal responses, clean stop."""

from __future__ import annotations

import socket

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey, exceptions
from cosmos_rest import call, unique

from cosmos_emulator import RunningCosmosEmulator, start_in_background


def test_container_throughput_can_be_read_and_replaced(database: DatabaseProxy) -> None:
    container = database.create_container(unique("c"), PartitionKey("/pk"), offer_throughput=600)
    assert container.get_throughput().offer_throughput == 600
    container.replace_throughput(1000)
    assert container.get_throughput().offer_throughput == 1000
    default = database.create_container(unique("c"), PartitionKey("/pk"))
    assert default.get_throughput().offer_throughput == 400


def test_unsupported_features_are_400_naming_them(container: ContainerProxy) -> None:
    container.create_item({"id": "1", "pk": "a"})
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        list(container.query_items_change_feed(start_time="Now", mode="AllVersionsAndDeletes"))
    assert err.value.status_code == 400 and "change feed mode" in str(err.value.message)
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.delete_all_items_by_partition_key("a")
    assert err.value.status_code == 400 and "partition key delete" in str(err.value.message)
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        list(container.scripts.list_stored_procedures())
    assert err.value.status_code == 400 and "stored procedures" in str(err.value.message)
    assert container.read_item("1", "a")["id"] == "1"


def test_no_response_writes_return_no_body(container: ContainerProxy) -> None:
    assert container.create_item({"id": "1", "pk": "a", "v": 1}, no_response=True) == {}
    assert container.read_item("1", "a")["v"] == 1


def test_unknown_admin_path_and_health(cosmos_emulator: RunningCosmosEmulator) -> None:
    status, _, body = call(
        cosmos_emulator.url, cosmos_emulator.key, "GET", "/_emulator/health", sign=False
    )
    assert status == 200 and body == {"status": "ok"}
    status, _, _ = call(
        cosmos_emulator.url, cosmos_emulator.key, "GET", "/_emulator/nope", sign=False
    )
    assert status == 404


def test_stop_releases_the_port_and_is_idempotent() -> None:
    emu = start_in_background()
    CosmosClient(emu.url, emu.key).create_database("d")
    emu.stop()
    emu.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", emu.port), timeout=1):
        pass


def test_fixed_port_cli_style_start() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with start_in_background(port=port) as emu:
        assert emu.url == f"http://127.0.0.1:{port}/"
        with pytest.raises(OSError):
            start_in_background(port=port)


def test_request_log_goes_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with start_in_background(log_requests=True) as emu:
        CosmosClient(emu.url, emu.key).create_database("logged")
    err = capfd.readouterr().err
    assert "cosmos-emulator: POST /dbs -> 201" in err


def test_integral_floats_and_ints_are_one_partition_key(
    cosmos_emulator: RunningCosmosEmulator, database: DatabaseProxy
) -> None:
    container = database.create_container(unique("n"), PartitionKey("/k"))
    container.create_item({"id": "1", "k": 5})
    assert container.read_item("1", partition_key=5.0)["k"] == 5
    with pytest.raises(exceptions.CosmosResourceExistsError):
        container.create_item({"id": "1", "k": 5.0})
