"""Issue 38: the emulator answers as Cosmos does where the Python SDK looks.

Each test is one group of the issue, through the real sync SDK, asserting what Cosmos does
(as documented, as its SDK's own tests assert, or as observed on the wire).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey, exceptions
from azure.cosmos.partition_key import NonePartitionKeyValue
from cosmos_rest import call, unique, values

from cosmos_emulator import RunningCosmosEmulator, start_in_background


def _headers(container: ContainerProxy) -> dict[str, str]:
    return dict(container.client_connection.last_response_headers)


class RequestLog:
    """The headers of every request the SDK sent (a `raw_response_hook`)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []

    def __call__(self, response: Any) -> None:
        self.sent.append(dict(response.http_request.headers))


# -- 1. items addressed by their self link -------------------------------------------------
def test_items_are_read_replaced_and_deleted_through_their_self_link(
    container: ContainerProxy,
) -> None:
    created = container.create_item({"id": "o1", "pk": "a", "v": 1})
    assert container.read_item(created, partition_key="a")["v"] == 1
    replaced = container.replace_item(created, {"id": "o1", "pk": "a", "v": 2})
    assert replaced["v"] == 2 and replaced["_rid"] == created["_rid"]
    container.delete_item(replaced, partition_key="a")
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("o1", partition_key="a")
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.delete_item(replaced, partition_key="a")


# -- 3. partition-key extraction -------------------------------------------------------------
def test_an_object_at_the_key_path_is_undefined(database: DatabaseProxy) -> None:
    container = database.create_container(unique("c"), PartitionKey("/address"))
    body = {"id": "d1", "address": {"street": "1 Microsoft Way", "city": "Redmond"}}
    container.create_item(body)  # the SDK sends [{}] (Undefined) for the object
    assert container.read_item("d1", partition_key=NonePartitionKeyValue)["address"]["city"] == (
        "Redmond"
    )


def test_quoted_key_path_segments_are_parsed(database: DatabaseProxy) -> None:
    path = '/"level\' 1*()"/"le/vel2"'
    container = database.create_container(unique("c"), PartitionKey(path))
    container.create_item({"id": "d1", "level' 1*()": {"le/vel2": "val1"}})
    assert container.read_item("d1", partition_key="val1")["id"] == "d1"
    rows = values(container.query_items("SELECT VALUE c.id FROM c", partition_key="val1"))
    assert rows == ["d1"]
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        database.create_container(unique("c"), PartitionKey('/"unterminated'))
    assert err.value.status_code == 400


# -- 4. indexing policy completed with Cosmos's defaults -------------------------------------
ETAG_EXCLUDED = {"path": '/"_etag"/?'}


@pytest.mark.parametrize(
    "policy",
    [
        None,
        {},
        {"indexingMode": "consistent", "automatic": True},
        {"includedPaths": [{"path": "/*"}]},
        {"includedPaths": [{"path": "/*", "indexes": [{"kind": "Range", "dataType": "Number"}]}]},
    ],
    ids=["none", "empty", "partial", "included only", "legacy indexes"],
)
def test_an_indexing_policy_is_completed_with_the_defaults(
    database: DatabaseProxy, policy: dict[str, Any] | None
) -> None:
    container = database.create_container(unique("c"), PartitionKey("/pk"), indexing_policy=policy)
    stored = container.read()["indexingPolicy"]
    assert stored["indexingMode"] == "consistent" and stored["automatic"] is True
    assert stored["includedPaths"] == [{"path": "/*"}]  # no legacy `indexes`
    assert stored["excludedPaths"] == [ETAG_EXCLUDED]


def test_excluded_paths_keep_the_etag_exclusion_on_create_and_replace(
    database: DatabaseProxy,
) -> None:
    excluded = {"path": '/"systemMetadata"/*'}
    container = database.create_container(
        unique("c"), PartitionKey("/pk"), indexing_policy={"excludedPaths": [excluded]}
    )
    assert container.read()["indexingPolicy"]["excludedPaths"] == [excluded, ETAG_EXCLUDED]
    replaced = database.replace_container(
        container, PartitionKey("/pk"), indexing_policy={"indexingMode": "consistent"}
    )
    assert replaced.read()["indexingPolicy"]["excludedPaths"] == [ETAG_EXCLUDED]


def test_indexing_mode_none_indexes_no_path(database: DatabaseProxy) -> None:
    container = database.create_container(
        unique("c"), PartitionKey("/pk"), indexing_policy={"indexingMode": "none"}
    )
    stored = container.read()["indexingPolicy"]
    assert stored == {
        "indexingMode": "none",
        "automatic": False,
        "includedPaths": [],
        "excludedPaths": [],
    }


# -- 5. session consistency --------------------------------------------------------------------
SESSION_TOKEN = re.compile(r"0:-1#(\d+)")


def test_the_sdk_sends_the_session_token_back_and_reads_its_writes(
    container: ContainerProxy,
) -> None:
    written = container.create_item({"id": "o1", "pk": "a", "v": 1})
    token = _headers(container)["x-ms-session-token"]
    assert _headers(container)["x-ms-alt-content-path"].endswith(f"/colls/{container.id}")
    first = SESSION_TOKEN.fullmatch(token)
    assert first is not None
    log = RequestLog()
    assert container.read_item("o1", "a", raw_response_hook=log) == written
    assert log.sent[-1]["x-ms-session-token"] == token

    container.replace_item("o1", {"id": "o1", "pk": "a", "v": 2})
    advanced = SESSION_TOKEN.fullmatch(_headers(container)["x-ms-session-token"])
    assert advanced is not None and int(advanced[1]) == int(first[1]) + 1
    assert container.read_item("o1", "a", raw_response_hook=log)["v"] == 2
    assert log.sent[-1]["x-ms-session-token"] == advanced[0]
    rows = list(container.query_items("SELECT * FROM c", partition_key="a", raw_response_hook=log))
    assert [r["v"] for r in rows] == [2]
    assert log.sent[-1]["x-ms-session-token"] == advanced[0]
    batch = container.execute_item_batch([("read", ("o1",))], "a", raw_response_hook=log)
    assert batch[0]["resourceBody"]["v"] == 2
    assert log.sent[-1]["x-ms-session-token"] == advanced[0]


def test_a_malformed_session_token_is_refused(container: ContainerProxy) -> None:
    container.create_item({"id": "o1", "pk": "a"})
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.read_item("o1", "a", session_token="not a token")
    assert err.value.status_code == 400 and "session token" in str(err.value.message)
    assert container.read_item("o1", "a", session_token="0:-1#1,1:-1#5")["id"] == "o1"


# -- 6. error texts ----------------------------------------------------------------------------
def test_batch_size_errors_are_cosmos_texts(container: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.execute_item_batch(batch_operations=[], partition_key="a")
    assert err.value.status_code == 400
    assert "Batch request has no operations." in str(err.value.message)
    too_many = [("create", ({"id": f"i{n}", "pk": "a"},)) for n in range(101)]
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.execute_item_batch(batch_operations=too_many, partition_key="a")
    assert err.value.status_code == 400
    assert "Batch request has more operations than what is supported." in str(err.value.message)


def test_not_found_and_conflict_are_cosmos_texts(
    database: DatabaseProxy, container: ContainerProxy
) -> None:
    with pytest.raises(exceptions.CosmosResourceNotFoundError) as missing:
        container.read_item("nope", partition_key="a")
    assert "Entity with the specified id does not exist in the system." in str(
        missing.value.message
    )
    container.create_item({"id": "o1", "pk": "a"})
    with pytest.raises(exceptions.CosmosResourceExistsError) as taken:
        container.create_item({"id": "o1", "pk": "a"})
    assert "Entity with the specified id already exists in the system." in str(taken.value.message)
    with pytest.raises(exceptions.CosmosResourceNotFoundError) as no_container:
        database.get_container_client("nope").read()
    assert "Resource Not Found" in str(no_container.value.message)
    with pytest.raises(exceptions.CosmosResourceExistsError) as same_name:
        database.create_container(container.id, PartitionKey("/pk"))
    assert "Resource with specified id or name already exists." in str(same_name.value.message)


def test_a_batch_with_too_few_key_components_is_cosmoss_text(database: DatabaseProxy) -> None:
    """Issue 44: the words the azure-cosmos SDK's `test_batch_subpartition` matches."""
    container = database.create_container(
        unique("c"), PartitionKey(path=["/state", "/city", "/zipcode"], kind="MultiHash")
    )
    item = {"id": "1", "state": "WA", "city": "Redmond", "zipcode": "98052"}
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.execute_item_batch([("create", (item,))], partition_key=["WA", "Redmond"])
    assert err.value.status_code == 400
    assert (
        "Partition key provided either doesn't correspond to definition in the collection or "
        "doesn't match partition key field values specified in the document." in err.value.message
    )
    batch = [("create", (item,))]
    assert len(container.execute_item_batch(batch, partition_key=["WA", "Redmond", "98052"])) == 1


def test_invalid_computed_properties_are_cosmoss_text(
    database: DatabaseProxy, container: ContainerProxy
) -> None:
    """Issue 44: the words the azure-cosmos SDK's computed-property tests match (a single
    definition where a list belongs), and for every other refusal too."""
    one = {"name": "cp_lower", "query": "SELECT VALUE LOWER(c.db_group) FROM c"}
    refused: list[Any] = [one, [{**one, "query": "SELECT VALUE c.a FROM c WHERE c.a"}]]
    for definitions in refused:
        with pytest.raises(exceptions.CosmosHttpResponseError) as err:
            database.replace_container(
                container, PartitionKey("/pk"), computed_properties=definitions
            )
        assert err.value.status_code == 400
        assert "One of the specified inputs is invalid" in err.value.http_error_message
    database.replace_container(container, PartitionKey("/pk"), computed_properties=[one])


# -- 7. container-read headers -----------------------------------------------------------------
def test_a_container_read_reports_index_progress_quota_and_statistics(
    container: ContainerProxy,
) -> None:
    for n in range(3):
        container.create_item({"id": f"o{n}", "pk": "a", "text": "x" * 1000})
    container.read()
    plain = _headers(container)
    assert plain["x-ms-documentdb-collection-index-transformation-progress"] == "100"
    assert (
        "x-ms-resource-usage" not in plain
        and "x-ms-documentdb-collection-lazy-indexing-progress" not in plain
    )

    props = container.read(populate_quota_info=True, populate_partition_key_range_statistics=True)
    usage = dict(
        part.split("=") for part in _headers(container)["x-ms-resource-usage"].split(";") if part
    )
    assert usage["documentsCount"] == "3" and int(usage["documentsSize"]) >= 2
    assert "x-ms-resource-quota" in _headers(container)
    assert props["statistics"][0]["documentCount"] == 3


# -- 8. `lsn` on point operations and batches --------------------------------------------------
def test_lsn_header_moves_once_per_write_and_once_per_batch(container: ContainerProxy) -> None:
    for name in ("read_item", "replace_item", "patch_item", "delete_item"):
        container.upsert_item({"id": name, "pk": "a", "value": 0})
    container.read_item("read_item", partition_key="a")
    lsn = int(_headers(container)["lsn"])
    container.create_item({"id": "one", "pk": "a"})
    assert int(_headers(container)["lsn"]) == lsn + 1
    batch = [
        ("create", ({"id": "create_item", "pk": "a"},)),
        ("replace", ("replace_item", {"id": "replace_item", "pk": "a", "value": True})),
        ("upsert", ({"id": "upsert_item", "pk": "a"},)),
        ("patch", ("patch_item", [{"op": "add", "path": "/color", "value": "red"}])),
        ("read", ("read_item",)),
        ("delete", ("delete_item",)),
    ]
    response = container.execute_item_batch(batch_operations=batch, partition_key="a")
    assert int(response.get_response_headers()["lsn"]) == lsn + 2
    container.delete_item("one", partition_key="a")
    assert int(_headers(container)["lsn"]) == lsn + 3


# -- 10. item size: the request body as sent (issue 44) ----------------------------------------
def test_size_is_judged_on_the_request_body_as_sent(
    container: ContainerProxy, cosmos_emulator: RunningCosmosEmulator
) -> None:
    """As the azure-cosmos SDK's own tests expect of Cosmos: the SDK's default body escapes
    CJK text (six bytes a character), so an item of 1.2 MB of UTF-8 is 2.4 MB as sent and
    refused, while a client sending compact UTF-8 writes the same item."""
    cjk = "\u4e2d\u6587" * 200_000  # 400,000 characters: 1.2 MB of UTF-8, 2.4 MB escaped
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.create_item({"id": "big", "pk": "a", "text": cjk})
    assert err.value.status_code == 413
    batch = [("upsert", ({"id": "in-batch", "pk": "a", "text": cjk},))]
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.execute_item_batch(batch, partition_key="a")
    assert err.value.status_code == 413
    database, name = container.container_link.split("/")[1::2]
    with CosmosClient(
        cosmos_emulator.url, cosmos_emulator.key, enable_compact_utf8_item_writes=True
    ) as compact:
        same = compact.get_database_client(database).get_container_client(name)
        assert same.create_item({"id": "big", "pk": "a", "text": cjk})["text"] == cjk
        assert same.execute_item_batch(batch, partition_key="a")[0]["statusCode"] == 201
        with pytest.raises(exceptions.CosmosHttpResponseError) as err:  # 2.16 MB of UTF-8
            same.create_item({"id": "bigger", "pk": "a", "text": "\u4e2d" * 720_000})
        assert err.value.status_code == 413
    assert container.read_item("big", partition_key="a")["text"] == cjk


# -- 11. smaller divergences ------------------------------------------------------------------
def test_a_replace_whose_body_changes_the_id_renames_the_item(container: ContainerProxy) -> None:
    created = container.create_item({"id": "old", "pk": "a", "v": 1})
    container.create_item({"id": "taken", "pk": "a"})
    renamed = container.replace_item("old", {"id": "new", "pk": "a", "v": 2})
    assert renamed["id"] == "new" and renamed["_rid"] == created["_rid"]
    assert container.read_item("new", partition_key="a")["v"] == 2
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("old", partition_key="a")
    with pytest.raises(exceptions.CosmosResourceExistsError):
        container.replace_item("new", {"id": "taken", "pk": "a"})


def test_a_query_whose_where_pins_the_key_is_routed_without_the_flag(
    database: DatabaseProxy,
) -> None:
    """Issue 44: Cosmos's gateway routes a query whose WHERE pins the whole partition key (a
    hierarchical one too) to that partition, so the sync SDK's query without the
    cross-partition flag is answered, ORDER BY included; a prefix alone still needs the flag."""
    three = database.create_container(
        unique("h"),
        PartitionKey(path=["/t", "/u"], kind="MultiHash"),
        offer_throughput=30000,
    )
    for n in range(30):
        three.create_item({"id": f"i{n}", "t": f"t{n % 3}", "u": f"u{n % 5}", "n": n})
    text = "SELECT VALUE c.n FROM c WHERE c.u = @u AND 't1' = c.t AND c.n > 0 ORDER BY c.n DESC"
    rows = three.query_items(text, parameters=[{"name": "@u", "value": "u1"}])
    assert values(rows) == [16, 1]
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        list(three.query_items("SELECT VALUE c.n FROM c WHERE c.t = 't1'"))
    assert err.value.status_code == 400
    flagged = three.query_items(
        "SELECT VALUE c.n FROM c WHERE c.t = 't1' ORDER BY c.n", enable_cross_partition_query=True
    )
    assert values(flagged) == list(range(1, 30, 3))


def test_a_query_without_key_or_cross_partition_flag_is_400(container: ContainerProxy) -> None:
    container.create_item({"id": "o1", "pk": "a"})
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        list(container.query_items("SELECT * FROM c"))
    assert err.value.status_code == 400
    assert "Cross partition query is required but disabled" in str(err.value.message)
    rows = container.query_items("SELECT VALUE c.id FROM c", enable_cross_partition_query=True)
    assert values(rows) == ["o1"]
    assert values(container.query_items("SELECT VALUE c.id FROM c", partition_key="a")) == ["o1"]


def test_a_partition_key_mismatch_has_substatus_1001(container: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosBatchOperationError) as err:
        container.execute_item_batch(
            batch_operations=[("create", ({"id": "o1", "pk": "other"},))], partition_key="a"
        )
    failed = err.value.operation_responses[0]
    assert failed["statusCode"] == 400 and failed["subStatusCode"] == 1001


def test_hierarchical_keys_refuse_an_empty_key_and_a_fourth_path(database: DatabaseProxy) -> None:
    paths = ["/state", "/city", "/zipcode"]
    container = database.create_container(unique("c"), PartitionKey(paths, kind="MultiHash"))
    container.create_item({"id": "o1", "state": "WA", "city": "Redmond", "zipcode": "98052"})
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        # The SDK sends an empty prefix as no key at all, which Cosmos refuses without the
        # cross-partition flag (the SDK's own comment on this path says the same).
        list(container.query_items("SELECT * FROM c", partition_key=[]))
    assert err.value.status_code == 400
    assert "Cross partition query is required but disabled" in str(err.value.message)
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        database.create_container(container.id, PartitionKey([*paths, "/street"], kind="MultiHash"))
    assert err.value.status_code == 400  # the definition is checked before the id is taken


def test_an_empty_key_header_on_a_query_is_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    """What another client could send as the key: an empty array names no partition."""
    container.create_item({"id": "o1", "pk": "a"})
    status, _, body = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "POST",
        f"/{container.container_link}/docs",
        {"query": "SELECT * FROM c"},
        {
            "Content-Type": "application/query+json",
            "x-ms-documentdb-isquery": "true",
            "x-ms-documentdb-query-enablecrosspartition": "true",
            "x-ms-documentdb-partitionkey": "[]",
        },
    )
    assert status == 400 and "empty array" in body["message"]


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("POST", ""), ("GET", "/pkranges/0"), ("PUT", "/docs")],
    ids=["post on the container", "one range", "put on the feed"],
)
def test_other_methods_and_paths_under_a_container_are_405(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy, method: str, suffix: str
) -> None:
    """The document routes serve `docs` only; the rest stays a clear 405, not an item."""
    status, _, body = call(
        cosmos_emulator.url, cosmos_emulator.key, method, f"/{container.container_link}{suffix}", {}
    )
    assert status == 405 and body["code"] == "MethodNotAllowed"


def test_a_continuation_token_in_cosmos_format_is_accepted(container: ContainerProxy) -> None:
    for n in range(4):
        container.create_item({"id": f"o{n}", "pk": "a"})
    foreign = "-RID:~a0NPAOszCpOChB4AAAAAAA==#RT:1#TRC:2#ISV:2#IEO:65567#QCF:8"
    pages = container.query_items(
        "SELECT * FROM c", partition_key="a", max_item_count=1, continuation=foreign
    ).by_page(foreign)
    assert [item["id"] for page in pages for item in page] == ["o0", "o1", "o2", "o3"]
    third = container.read_item("o2", partition_key="a")["_rid"]
    at_third = f"+RID:~{third}#RT:2#TRC:2#ISV:2#IEO:65567#QCF:8"
    resumed = container.query_items("SELECT * FROM c", partition_key="a").by_page(at_third)
    assert [item["id"] for page in resumed for item in page] == ["o2", "o3"]


def test_an_item_ttl_of_null_is_refused(ttl_container: ContainerProxy) -> None:
    for ttl in (None, 0, -10, 2**31):
        with pytest.raises(exceptions.CosmosHttpResponseError) as err:
            ttl_container.create_item({"id": "o1", "pk": "a", "ttl": ttl})
        assert err.value.status_code == 400 and "ttl" in str(err.value.message)
    assert ttl_container.create_item({"id": "o1", "pk": "a", "ttl": -1})["ttl"] == -1


def test_the_session_is_per_container(
    cosmos_emulator: RunningCosmosEmulator, database: DatabaseProxy
) -> None:
    """A write to one container does not move another's range LSN."""
    client = CosmosClient(cosmos_emulator.url, cosmos_emulator.key)
    first = client.get_database_client(database.id).create_container(
        unique("c"), PartitionKey("/pk")
    )
    second = database.create_container(unique("c"), PartitionKey("/pk"))
    first.create_item({"id": "o1", "pk": "a"})
    before = _headers(first)["lsn"]
    second.create_item({"id": "o1", "pk": "a"})
    first.read_item("o1", partition_key="a")
    assert _headers(first)["lsn"] == before


def test_range_lsns_never_go_back_across_a_restart(tmp_path: Path) -> None:
    """Range LSNs are not journaled: a restart resumes each range at the account's LSN."""
    with start_in_background("127.0.0.1", 0, data_dir=str(tmp_path)) as emu:
        client = CosmosClient(emu.url, emu.key)
        container = client.create_database("d").create_container("c", PartitionKey("/pk"))
        container.create_item({"id": "o1", "pk": "a"})
        container.delete_item("o1", partition_key="a")  # a write that stamps no item
        before = int(_headers(container)["lsn"])
    with start_in_background("127.0.0.1", 0, data_dir=str(tmp_path)) as emu:
        client = CosmosClient(emu.url, emu.key)
        container = client.get_database_client("d").get_container_client("c")
        container.create_item({"id": "o2", "pk": "a"})
        assert int(_headers(container)["lsn"]) > before
