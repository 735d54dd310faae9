"""A lease-container client for the lost-update tests, run as a process of its own.

`python lease_worker.py URL KEY DATABASE CONTAINER NAME UPDATES LEASES SEED` makes UPDATES
optimistic updates of random leases (read, then replace or patch with If-Match; a 412 means
someone else won, so read again) and prints, as one JSON line, how many updates of each lease
it was acknowledged. It prints `ready` once connected and starts on a line on stdin.
"""

from __future__ import annotations

import json
import random
import sys

from azure.core import MatchConditions
from azure.cosmos import ContainerProxy, CosmosClient, exceptions


def update_once(container: ContainerProxy, lease_id: str, name: str, use_patch: bool) -> int:
    """One acknowledged update; returns how many 412s it took."""
    conflicts = 0
    while True:
        lease = container.read_item(lease_id, partition_key=lease_id)
        try:
            if use_patch:
                container.patch_item(
                    lease_id,
                    lease_id,
                    [
                        {"op": "incr", "path": "/count", "value": 1},
                        {"op": "add", "path": "/history/-", "value": name},
                        {"op": "set", "path": "/owner", "value": name},
                    ],
                    etag=lease["_etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
            else:
                lease["count"] += 1
                lease["history"].append(name)
                lease["owner"] = name
                container.replace_item(
                    lease_id,
                    lease,
                    etag=lease["_etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
            return conflicts
        except exceptions.CosmosAccessConditionFailedError:
            conflicts += 1


def run(
    container: ContainerProxy, name: str, updates: int, leases: int, seed: int
) -> dict[str, int]:
    rng = random.Random(seed)
    acknowledged = {f"lease-{i}": 0 for i in range(leases)}
    conflicts = 0
    for n in range(updates):
        lease_id = f"lease-{rng.randrange(leases)}"
        conflicts += update_once(container, lease_id, name, use_patch=n % 2 == 1)
        acknowledged[lease_id] += 1
    return {**acknowledged, "_conflicts": conflicts}


def main(argv: list[str]) -> None:
    url, key, database, container_name, name, updates, leases, seed = argv
    client = CosmosClient(url, key)
    container = client.get_database_client(database).get_container_client(container_name)
    container.read()  # connected and authorised
    print("ready", flush=True)
    sys.stdin.readline()  # the test starts every worker at once
    result = run(container, name, int(updates), int(leases), int(seed))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
