"""In-memory account state: databases, containers and items, with TTL visibility."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .errors import bad_request, conflict, not_found, unsupported
from .ids import RidAllocator, new_etag, validate_id
from .query.computed import check_definitions
from .query.values import UNDEFINED

DEFAULT_INDEXING_POLICY: dict[str, Any] = {
    "indexingMode": "consistent",
    "automatic": True,
    "includedPaths": [{"path": "/*"}],
    "excludedPaths": [{"path": '/"_etag"/?'}],
}


@dataclass
class Item:
    doc: dict[str, Any]
    # Float write time: `_ts` is whole seconds, but expiry is timed from the exact write.
    written_at: float
    # Creation order across the container, kept by replaces: cross-partition feeds and
    # queries without ORDER BY list items in it, like one physical partition does.
    seq: int = 0
    # False when written with `x-ms-indexing-directive: exclude` (or not included while the
    # indexing policy is not automatic): queries skip it; reads and feeds still see it.
    indexed: bool = True


@dataclass
class Container:
    props: dict[str, Any]
    partitions: dict[str, dict[str, Item]] = field(default_factory=dict)
    throughput: int | None = None  # None: shares its database's throughput

    @property
    def rid(self) -> str:
        return str(self.props["_rid"])

    @property
    def pk_paths(self) -> list[str]:
        return list(self.props["partitionKey"]["paths"])

    @property
    def default_ttl(self) -> int | None:
        value = self.props.get("defaultTtl")
        return value if isinstance(value, int) else None

    def expires_at(self, item: Item) -> float | None:
        default = self.default_ttl
        if default is None:
            return None
        ttl = item.doc.get("ttl")
        if not isinstance(ttl, int) or isinstance(ttl, bool):
            ttl = default
        if ttl == -1:
            return None
        return item.written_at + ttl

    def is_live(self, item: Item, now: float) -> bool:
        expiry = self.expires_at(item)
        return expiry is None or now < expiry

    def live_items(
        self, pk_key: str | None, now: float, *, indexed_only: bool = False
    ) -> list[dict[str, Any]]:
        def wanted(item: Item) -> bool:
            return self.is_live(item, now) and (item.indexed or not indexed_only)

        if pk_key is not None:
            part = self.partitions.get(pk_key, {})
            return [i.doc for i in part.values() if wanted(i)]
        live = [i for p in self.partitions.values() for i in p.values() if wanted(i)]
        live.sort(key=lambda i: i.seq)
        return [i.doc for i in live]

    def purge_expired(self, now: float) -> int:
        if self.default_ttl is None:
            return 0  # nothing in this container can expire
        removed = 0
        for key in list(self.partitions):
            part = self.partitions[key]
            for item_id in [i for i, item in part.items() if not self.is_live(item, now)]:
                del part[item_id]
                removed += 1
            if not part:
                del self.partitions[key]
        return removed

    def pk_from_doc(self, doc: dict[str, Any]) -> list[Any]:
        values: list[Any] = []
        for path in self.pk_paths:
            node: Any = doc
            for seg in path.strip("/").split("/"):
                node = node.get(seg, UNDEFINED) if isinstance(node, dict) else UNDEFINED
            values.append({} if node is UNDEFINED else node)
        return values


def pk_key(values: list[Any]) -> str:
    # Cosmos numbers are doubles: 5 and 5.0 are one partition key value.
    normal = [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]
    return json.dumps(normal, sort_keys=True, separators=(",", ":"))


@dataclass
class Database:
    props: dict[str, Any]
    containers: dict[str, Container] = field(default_factory=dict)
    throughput: int | None = None  # shared throughput, when provisioned on the database


class Store:
    """All state; every mutation happens under `lock`, which makes batches atomic."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.databases: dict[str, Database] = {}
        self.rids = RidAllocator()
        self.lsn = 0
        self.changes = 0

    def touch(self) -> None:
        self.lsn += 1
        self.changes += 1

    # -- databases -----------------------------------------------------------------------
    def find_database(self, name: str) -> Database:
        db = self.databases.get(name)
        if db is None:
            db = next((d for d in self.databases.values() if d.props["_rid"] == name), None)
        if db is None:
            raise not_found(f"Database '{name}' not found.")
        return db

    def create_database(self, body: object) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("Database body must be a JSON object.")
        name = validate_id(body.get("id"), "database id")
        if name in self.databases:
            raise conflict(f"Database '{name}' already exists.")
        rid = self.rids.database()
        props = {
            "id": name,
            "_rid": rid,
            "_self": f"dbs/{rid}/",
            "_etag": new_etag(),
            "_colls": "colls/",
            "_users": "users/",
            "_ts": int(time.time()),
        }
        self.databases[name] = Database(props)
        self.touch()
        return props

    def delete_database(self, name: str) -> None:
        db = self.find_database(name)
        del self.databases[db.props["id"]]
        self.touch()

    # -- containers ----------------------------------------------------------------------
    def find_container(self, db_name: str, name: str) -> Container:
        db = self.find_database(db_name)
        coll = db.containers.get(name)
        if coll is None:
            coll = next((c for c in db.containers.values() if c.rid == name), None)
        if coll is None:
            raise not_found(f"Container '{name}' not found in database '{db.props['id']}'.")
        return coll

    def create_container(self, db_name: str, body: object) -> dict[str, Any]:
        db = self.find_database(db_name)
        if not isinstance(body, dict):
            raise bad_request("Container body must be a JSON object.")
        name = validate_id(body.get("id"), "container id")
        if name in db.containers:
            raise conflict(f"Container '{name}' already exists.")
        rid = self.rids.child(db.props["_rid"], 4)
        props = {
            "id": name,
            "indexingPolicy": body.get("indexingPolicy") or dict(DEFAULT_INDEXING_POLICY),
            "partitionKey": _partition_key_definition(body.get("partitionKey")),
            "conflictResolutionPolicy": body.get("conflictResolutionPolicy")
            or {
                "mode": "LastWriterWins",
                "conflictResolutionPath": "/_ts",
                "conflictResolutionProcedure": "",
            },
            "geospatialConfig": {"type": "Geography"},
            "_rid": rid,
            "_ts": int(time.time()),
            "_self": f"{db.props['_self']}colls/{rid}/",
            "_etag": new_etag(),
            "_docs": "docs/",
            "_sprocs": "sprocs/",
            "_triggers": "triggers/",
            "_udfs": "udfs/",
            "_conflicts": "conflicts/",
        }
        _apply_mutable_container_props(props, body)
        db.containers[name] = Container(props)
        self.touch()
        return props

    def replace_container(self, db_name: str, name: str, body: object) -> dict[str, Any]:
        coll = self.find_container(db_name, name)
        if not isinstance(body, dict):
            raise bad_request("Container body must be a JSON object.")
        if body.get("id") != coll.props["id"]:
            raise bad_request("The container id in the body does not match the URL.")
        if (
            "partitionKey" in body
            and _partition_key_definition(body["partitionKey"])["paths"]
            != coll.props["partitionKey"]["paths"]
        ):
            raise bad_request("The partition key of a container cannot be changed.")
        props = dict(coll.props)
        if body.get("indexingPolicy"):
            props["indexingPolicy"] = body["indexingPolicy"]
        props.pop("defaultTtl", None)
        _apply_mutable_container_props(props, body)
        props["_etag"] = new_etag()
        props["_ts"] = int(time.time())
        coll.props = props
        self.touch()
        return props

    def delete_container(self, db_name: str, name: str) -> None:
        db = self.find_database(db_name)
        coll = self.find_container(db_name, name)
        del db.containers[coll.props["id"]]
        self.touch()

    def purge_expired(self) -> int:
        now = time.time()
        with self.lock:
            removed = sum(
                c.purge_expired(now) for d in self.databases.values() for c in d.containers.values()
            )
            if removed:
                self.changes += 1
            return removed

    # -- persistence ---------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "version": 1,
                "next_rid": self.rids.next_value(),
                "lsn": self.lsn,
                "databases": [
                    {
                        "props": db.props,
                        "throughput": db.throughput,
                        "containers": [
                            {
                                "props": c.props,
                                "throughput": c.throughput,
                                "items": [
                                    {
                                        "pk": key,
                                        "doc": it.doc,
                                        "written_at": it.written_at,
                                        "seq": it.seq,
                                        "indexed": it.indexed,
                                    }
                                    for key, part in c.partitions.items()
                                    for it in part.values()
                                ],
                            }
                            for c in db.containers.values()
                        ],
                    }
                    for db in self.databases.values()
                ],
            }

    def restore(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.rids = RidAllocator(int(data.get("next_rid", 1)) + 1)
            self.lsn = int(data.get("lsn", 0))
            self.databases = {}
            for db_data in data.get("databases", []):
                db = Database(db_data["props"])
                for c_data in db_data.get("containers", []):
                    coll = Container(c_data["props"])
                    for it in c_data.get("items", []):
                        coll.partitions.setdefault(it["pk"], {})[it["doc"]["id"]] = Item(
                            it["doc"],
                            float(it["written_at"]),
                            int(it.get("seq", 0)),
                            it.get("indexed", True) is not False,
                        )
                    coll.throughput = c_data.get("throughput")
                    self._number_unnumbered(coll)
                    db.containers[coll.props["id"]] = coll
                db.throughput = db_data.get("throughput")
                self.databases[db.props["id"]] = db

    def _number_unnumbered(self, coll: Container) -> None:
        """Items saved before `_lsn` existed get one, in creation order, after every other."""
        missing = [i for p in coll.partitions.values() for i in p.values() if "_lsn" not in i.doc]
        for item in sorted(missing, key=lambda i: i.seq):
            self.lsn += 1
            item.doc["_lsn"] = self.lsn


def _partition_key_definition(raw: object) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("paths"), list) or not raw["paths"]:
        raise bad_request("A container needs a partitionKey definition with 'paths'.")
    paths = raw["paths"]
    kind = raw.get("kind", "Hash")
    if any(not isinstance(p, str) or not p.startswith("/") or p == "/" for p in paths):
        raise bad_request("Partition key paths must look like '/property'.")
    if kind == "Hash" and len(paths) != 1:
        raise bad_request("A Hash partition key has exactly one path.")
    if kind == "MultiHash" and not 1 <= len(paths) <= 3:
        raise bad_request("A MultiHash (hierarchical) partition key has one to three paths.")
    if kind not in ("Hash", "MultiHash"):
        raise unsupported(f"partition key kind {kind!r}")
    return {"paths": list(paths), "kind": kind, "version": raw.get("version", 2)}


def _apply_mutable_container_props(props: dict[str, Any], body: dict[str, Any]) -> None:
    if "defaultTtl" in body and body["defaultTtl"] is not None:
        ttl = body["defaultTtl"]
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl == 0 or ttl < -1:
            raise bad_request("defaultTtl must be -1 or a positive number of seconds.")
        props["defaultTtl"] = ttl
    unique = body.get("uniqueKeyPolicy")
    if isinstance(unique, dict) and unique.get("uniqueKeys"):
        raise unsupported("unique key policies")
    # A replace carries the whole definition: computed properties it leaves out are dropped.
    props.pop("computedProperties", None)
    computed = check_definitions(body.get("computedProperties"))
    if computed:
        props["computedProperties"] = computed
