"""`orders up --entities FILE`: a user's own queues, topics and containers, checked whole
before anything starts (a bad field is named), merged beside the app's own entities and never
over them, and kept for the next run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orders.entrypoints.local_entities import (
    EntitiesError,
    LocalEntities,
    load_entities,
    merged_servicebus_config,
)
from orders.entrypoints.localstack import QueueOptions
from orders.entrypoints.up import ENTITIES_FILE, entities_for
from servicebus_emulator.config import parse_config

GUIDE = Path(__file__).resolve().parents[2] / "packages/exactly-once/src/exactly_once/README.md"


def guide_entities() -> dict[str, Any]:
    [block] = re.findall(r"^```json\n(.*?)^```", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
    loaded: dict[str, Any] = json.loads(block)
    return loaded


def written(tmp_path: Path, content: object, name: str = "entities.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def namespace(**entities: Any) -> dict[str, Any]:
    return {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", **entities}]}}


def queue(name: str = "greetings", **properties: Any) -> dict[str, Any]:
    return {"Name": name, "Properties": properties}


def container(**fields: Any) -> dict[str, Any]:
    return {
        "Cosmos": {
            "Containers": [
                {"database": "greetings", "id": "cards", "partitionKey": {"paths": ["/pk"]}}
                | fields
            ]
        }
    }


def test_the_guides_file_adds_its_queue_beside_the_apps_and_the_emulator_takes_it(
    tmp_path: Path,
) -> None:
    entities = load_entities(written(tmp_path, guide_entities()))

    merged = merged_servicebus_config(QueueOptions().config(), entities)

    parsed = parse_config(merged)  # the emulator's own check of the merged config
    names = [q.name for q in parsed.queues]
    assert names == ["orders", "order-status", "greetings"]
    greetings = parsed.queues[2]
    assert (greetings.lock_duration_ms, greetings.max_delivery_count) == (30_000, 10)
    assert [t.name for t in parsed.topics] == ["order-events"]
    [cards] = entities.containers
    assert (cards.database, cards.id, cards.partition_key_path, cards.default_ttl) == (
        "greetings",
        "cards",
        "/pk",
        -1,
    )
    assert QueueOptions().config()["UserConfig"]["Namespaces"][0]["Queues"][-1]["Name"] == (
        "order-status"
    )  # the app's own config is left as it was


@pytest.mark.parametrize(
    "content",
    [
        namespace(Queues=[queue()]),  # no Topics, which the official schema requires
        namespace(Topics=[{"Name": "news", "Subscriptions": [{"Name": "mine"}]}]),  # no Queues
        container(),  # containers only
        # An official emulator Config.json as it is, logging section and all.
        {
            "UserConfig": {
                "Namespaces": [{"Name": "sbemulatorns", "Queues": [queue()], "Topics": []}],
                "Logging": {"Type": "File"},
            }
        },
    ],
)
def test_a_file_may_leave_out_what_it_has_none_of(tmp_path: Path, content: object) -> None:
    entities = load_entities(written(tmp_path, content))

    parse_config(merged_servicebus_config(QueueOptions().config(), entities))


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (
            namespace(Queues=[queue(LockDuration="30 seconds")]),
            "UserConfig.Namespaces[0].Queues[0].Properties.LockDuration: '30 seconds' is not an "
            "ISO 8601 duration",
        ),
        (
            namespace(Queues=[queue(MaxDeliveryCount="10")]),
            "Queues[0].Properties.MaxDeliveryCount: Input should be a valid integer",
        ),
        (
            namespace(Queues=[queue(MaxDeliveryCount=0)]),
            "Queues[0].Properties.MaxDeliveryCount: Input should be greater than or equal to 1",
        ),
        (
            namespace(Queues=[queue(RequiresSession="yes")]),
            "Queues[0].Properties.RequiresSession: Input should be a valid boolean",
        ),
        (
            namespace(Queues=[queue(LockDurations="PT1M")]),
            "Queues[0].Properties.LockDurations: Extra inputs are not permitted",
        ),
        (namespace(Queues=[queue("bad name")]), "Queues[0].Name: String should match pattern"),
        (namespace(Queues=[{"Properties": {}}]), "Queues[0].Name: Field required"),
        (
            namespace(Queues=[queue("mine"), queue("MINE")]),
            "UserConfig.Namespaces[0]: entity 'MINE' is defined twice",
        ),
        (
            namespace(Topics=[{"Name": "news", "Subscriptions": []}]),
            "Topics[0].Subscriptions: List should have at least 1 item",
        ),
        (
            namespace(Topics=[{"Name": "news", "Subscriptions": [{"Name": "a", "Rules": [{}]}]}]),
            "Topics[0].Subscriptions[0].Rules[0].Name: Field required",
        ),
        (
            {"UserConfig": {"Namespaces": [{"Name": "mine", "Queues": [queue()]}]}},
            "UserConfig.Namespaces[0].Name: Input should be 'sbemulatorns'",
        ),
        (
            {"UserConfig": {"Namespaces": [{"Queues": []}, {"Queues": []}]}},
            "UserConfig.Namespaces: List should have at most 1 item",
        ),
        (
            container(partitionKey={"paths": ["pk"]}),
            "Cosmos.Containers[0].partitionKey.paths[0]: 'pk' is not a partition key path",
        ),
        (
            container(partitionKey={"paths": ["/a", "/b"]}),
            "Cosmos.Containers[0].partitionKey: one path only",
        ),
        (container(defaultTtl=0), "Cosmos.Containers[0]: defaultTtl is -1"),
        (container(id="a/b"), "Cosmos.Containers[0].id: String should match pattern"),
        (container(ttl=-1), "Cosmos.Containers[0].ttl: Extra inputs are not permitted"),
        ({"Cosmos": {"Containers": [{"id": "cards"}]}}, "Cosmos.Containers[0].database: Field"),
        ({}, "the file: the file defines nothing: give UserConfig, Cosmos or both"),
        ({"Queues": [queue()]}, "Queues: Extra inputs are not permitted"),
        ([], "the file: Input should be a valid dictionary"),
        ("{not json", "is not JSON"),
    ],
)
def test_a_bad_shape_is_refused_with_the_field_named(
    tmp_path: Path, content: object, named: str
) -> None:
    path = written(tmp_path, content)

    with pytest.raises(EntitiesError) as refused:
        load_entities(path)

    assert named in str(refused.value)
    assert str(path) in str(refused.value)


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (namespace(Queues=[queue("orders")]), "Namespaces[0].Queues[0].Name: 'orders'"),
        (namespace(Queues=[queue("Order-Status")]), "Queues[0].Name: 'Order-Status'"),
        (
            namespace(Topics=[{"Name": "order-events", "Subscriptions": [{"Name": "mine"}]}]),
            "Namespaces[0].Topics[0].Name: 'order-events'",
        ),
        (container(database="orders", id="orders"), "Cosmos.Containers[0]: orders/orders"),
        (container(database="orders", id="inbox"), "Cosmos.Containers[0]: orders/inbox"),
    ],
)
def test_a_name_the_app_already_uses_is_refused_never_merged_over_it(
    tmp_path: Path, content: object, named: str
) -> None:
    with pytest.raises(EntitiesError, match="one of the app's own") as refused:
        entities_for(tmp_path, written(tmp_path, content, "mine.json"))

    assert named in str(refused.value)


def test_more_entities_than_a_namespace_holds_are_refused(tmp_path: Path) -> None:
    many = namespace(Queues=[queue(f"q{number}") for number in range(48)])

    with pytest.raises(EntitiesError, match=r"UserConfig.Namespaces\[0\]: .* more than 50"):
        entities_for(tmp_path, written(tmp_path, many, "mine.json"))


def test_the_entities_kept_by_the_last_run_are_added_again_unless_others_are_given(
    tmp_path: Path,
) -> None:
    assert entities_for(tmp_path, None) == (None, None)
    kept = LocalEntities.model_validate(namespace(Queues=[queue("kept")]))
    (tmp_path / ENTITIES_FILE).write_text(kept.to_json())
    given = written(tmp_path, namespace(Queues=[queue("given")]), "given.json")

    again, source = entities_for(tmp_path, None)
    replaced, replaced_source = entities_for(tmp_path, given)

    assert again == kept and source == tmp_path / ENTITIES_FILE
    assert replaced is not None and replaced.summary() == "queue given"
    assert replaced_source == given


def test_up_refuses_a_bad_file_before_starting_anything(tmp_path: Path) -> None:
    bad = written(tmp_path, namespace(Queues=[queue(LockDuration="PT30")]), "mine.json")
    directory = tmp_path / "local"

    result = subprocess.run(
        [sys.executable, "-m", "orders", "up", "--dir", str(directory), "--entities", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2
    assert "Queues[0].Properties.LockDuration: 'PT30' is not an ISO 8601 duration" in " ".join(
        result.stderr.split()
    )
    assert not directory.exists()  # nothing started, nothing written
