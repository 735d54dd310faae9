"""In-memory account state: databases, containers and items, with TTL visibility.

Every change is also appended to `Store.log` (when a journal is attached) as an operation
record; the journal writes a request's records as one line before the request is answered.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .epk import effective_partition_key
from .errors import bad_request, conflict, not_found, unsupported
from .ids import RidAllocator, new_etag, validate_id
from .lsn_index import LsnIndex
from .query.computed import check_definitions
from .query.values import UNDEFINED
from .ranges import RangeMap, range_width, ranges_for_throughput

ChangeLog = list[dict[str, Any]]


# A stored document is kept as the compact JSON text of its body (ASCII, so any string,
# lone surrogates included, comes back as it went in), deflated at the fastest level, and
# parsed where it is read: a parsed document costs about six times its text in Python objects,
# and the store holds every live item of every container (the deflated text is about half the
# text; inflating it costs a fraction of parsing it). The fields the store itself consults on
# each write or expiry check are kept beside the text, so only reads, queries and feeds parse.
_encode_document = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


class Item:
    """One stored item version: its document as deflated JSON text, and the write's facts."""

    __slots__ = ("deflated", "etag", "id", "indexed", "lsn", "seq", "ttl", "written_at")

    def __init__(
        self, doc: dict[str, Any], written_at: float, seq: int = 0, indexed: bool = True
    ) -> None:
        self.deflated = zlib.compress(_encode_document(doc).encode("ascii"), 1)
        self.id: str = doc["id"]
        self.etag: str = doc["_etag"]
        lsn = doc.get("_lsn")
        self.lsn = lsn if isinstance(lsn, int) else 0
        ttl = doc.get("ttl")
        # The item's own `ttl` when it is an integer (a boolean is not), else None.
        self.ttl: int | None = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None
        # Float write time: `_ts` is whole seconds, but expiry is timed from the exact write.
        self.written_at = written_at
        # Creation order across the container, kept by replaces: cross-partition feeds and
        # queries without ORDER BY list items in it, like one physical partition does.
        self.seq = seq
        # False when written with `x-ms-indexing-directive: exclude` (or not included while
        # the indexing policy is not automatic): queries skip it; reads and feeds still see it.
        self.indexed = indexed

    @property
    def doc(self) -> dict[str, Any]:
        """The document, parsed anew: a caller may change it without touching the store."""
        parsed: dict[str, Any] = json.loads(zlib.decompress(self.deflated))
        return parsed

    def __repr__(self) -> str:
        return f"Item(id={self.id!r}, lsn={self.lsn}, seq={self.seq})"


@dataclass
class Container:
    props: dict[str, Any]
    partitions: dict[str, dict[str, Item]] = field(default_factory=dict)
    throughput: int | None = None  # None: shares its database's throughput
    # Every stored item version by `_lsn` (the change feed), also per effective partition key
    # and, for hierarchical keys, per EPK prefix: the scopes the SDK's feed ranges ask for.
    feed: LsnIndex[Item] = field(default_factory=LsnIndex)
    # Only hierarchical-key prefixes have an index of their own: a whole key's EPK names one
    # partition (`_epk_partitions`), whose few items are listed from the partition itself,
    # rather than every partition holding an index (a few hundred bytes) of its own.
    scoped_feeds: dict[str, LsnIndex[Item]] = field(default_factory=dict)
    _scopes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _epk_partitions: dict[str, str] = field(default_factory=dict)
    log: ChangeLog | None = None
    # How many partition key ranges (physical partitions) split the EPK space at creation;
    # later splits and merges change `ranges` (and this count with it).
    range_count: int = 1
    # Each partition key range's log sequence number, as Cosmos keeps one per range: one step
    # per committed write request in that range (a transactional batch is one step), so `lsn`
    # headers and session tokens advance with that range's writes only. Never above
    # `Store.lsn`.
    range_lsns: list[int] = field(default_factory=list)
    # The change feed of each range, when there is more than one (else `feed` is the range's).
    range_feeds: list[LsnIndex[Item]] = field(default_factory=list)
    _pk_segments: list[list[str]] | None = None

    def __post_init__(self) -> None:
        definition = self.props["partitionKey"]
        self.ranges = RangeMap(
            self.range_count, definition.get("kind", "Hash"), definition.get("version", 1) == 2
        )
        self._range_ids = self.ranges.ids()
        self.range_lsns = [0] * self.range_count
        if self.range_count > 1:
            self.range_feeds = [LsnIndex() for _ in range(self.range_count)]

    # -- splits and merges (the range map changes; each range's feed and LSN follow) ---------
    def split_range(self, range_id: str) -> tuple[str, str]:
        """Split live range `range_id` in two (RangeError when it cannot be); the children's
        ids. They start at their parent's LSN, so session tokens and `lsn` stay monotonic."""
        parent_lsn = self.range_lsns[self.ranges.live_index(range_id)]
        children = self.ranges.split(range_id)
        self._ranges_changed({child: parent_lsn for child in children})
        return children

    def merge_ranges(self, first_id: str, second_id: str) -> str:
        """Merge two adjacent live ranges (RangeError when they are not); the new range's id."""
        lsn = max(self.range_lsns[self.ranges.live_index(i)] for i in (first_id, second_id))
        merged = self.ranges.merge(first_id, second_id)
        self._ranges_changed({merged: lsn})
        return merged

    def restore_ranges(self, record: object) -> None:
        """The range map a journal recorded (ValueError when invalid); feeds rebuilt."""
        self.ranges.restore(record)
        self._ranges_changed({})

    def _ranges_changed(self, new_lsns: dict[str, int]) -> None:
        old = {r: lsn for r, lsn in zip(self._range_ids, self.range_lsns, strict=False)}
        old.update(new_lsns)
        self._range_ids = self.ranges.ids()
        self.range_count = self.ranges.count
        self.range_lsns = [old.get(r, 0) for r in self._range_ids]
        self.range_feeds = []
        if self.range_count > 1:
            self.range_feeds = [LsnIndex() for _ in range(self.range_count)]
            for key, part in self.partitions.items():
                feed = self.range_feeds[self.range_of_partition(key)]
                for item in part.values():
                    feed.add(_lsn_of(item), item)
        if self.log is not None:
            self.log.append({"o": "r", "c": self.rid, "m": self.ranges.to_record()})

    def range_of_partition(self, key: str) -> int:
        """The range holding stored partition `key` (its EPK is cached with its scopes)."""
        if self.range_count == 1:
            return 0
        scopes = self._scopes.get(key)
        return self.ranges.index_of_epk(scopes[-1]) if scopes else 0

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
        ttl = default if item.ttl is None else item.ttl
        if ttl == -1:
            return None
        return item.written_at + ttl

    def is_live(self, item: Item, now: float) -> bool:
        expiry = self.expires_at(item)
        return expiry is None or now < expiry

    def live_items(
        self,
        pk_key: str | None,
        now: float,
        *,
        indexed_only: bool = False,
        range_index: int | None = None,
    ) -> list[dict[str, Any]]:
        """Live items of one partition (`pk_key`), one range (`range_index`) or all."""

        def wanted(item: Item) -> bool:
            return self.is_live(item, now) and (item.indexed or not indexed_only)

        if pk_key is not None:
            part = self.partitions.get(pk_key, {})
            return [i.doc for i in part.values() if wanted(i)]
        parts: Iterable[tuple[str, dict[str, Item]]] = self.partitions.items()
        if range_index is not None and self.range_count > 1:
            parts = [(k, p) for k, p in parts if self.range_of_partition(k) == range_index]
        live = [i for _, p in parts for i in p.values() if wanted(i)]
        live.sort(key=lambda i: i.seq)
        return [i.doc for i in live]

    def purge_expired(self, now: float) -> int:
        if self.default_ttl is None:
            return 0  # nothing in this container can expire
        removed = 0
        for key in list(self.partitions):
            part = self.partitions[key]
            for item_id in [i for i, item in part.items() if not self.is_live(item, now)]:
                self.remove_item(key, item_id)
                removed += 1
        return removed

    # -- the only two ways an item is stored or dropped (they keep the LSN indexes) ---------
    def put_item(self, key: str, item: Item, now: float | None) -> None:
        """Store `item` in partition `key`; `now=None` (a journal replay) keeps dict order."""
        item_id = item.id
        old = self.partitions.get(key, {}).get(item_id)
        if old is not None and now is not None and not self.is_live(old, now):
            # Replacing an expired leftover must look like a fresh insert in iteration order;
            # journaled as the removal it is, so a replay orders the partition the same way.
            self.remove_item(key, item_id)
            old = None
        part = self.partitions.setdefault(key, {})
        if old is not None:
            self._unindex(key, old)
        part[item_id] = item
        lsn = _lsn_of(item)
        self.feed.add(lsn, item)
        for scope in self._scope_keys(key, item)[:-1]:
            self.scoped_feeds.setdefault(scope, LsnIndex()).add(lsn, item)
        if self.range_feeds:
            self.range_feeds[self.range_of_partition(key)].add(lsn, item)
        if self.log is not None:
            self.log.append(item_record(self.rid, key, item))

    def remove_item(self, key: str, item_id: str) -> Item | None:
        part = self.partitions.get(key)
        item = part.pop(item_id, None) if part is not None else None
        if item is None:
            return None
        self._unindex(key, item)
        if not part:
            del self.partitions[key]
            scopes = self._scopes.pop(key, ())
            if scopes:
                self._epk_partitions.pop(scopes[-1], None)
        if self.log is not None:
            self.log.append({"o": "x", "c": self.rid, "k": key, "id": item_id})
        return item

    def _unindex(self, key: str, item: Item) -> None:
        lsn = _lsn_of(item)
        self.feed.discard(lsn, item)
        if self.range_feeds:
            self.range_feeds[self.range_of_partition(key)].discard(lsn, item)
        for scope in self._scopes.get(key, ())[:-1]:
            index = self.scoped_feeds.get(scope)
            if index is not None:
                index.discard(lsn, item)
                if not index:
                    del self.scoped_feeds[scope]

    def _scope_keys(self, key: str, item: Item) -> tuple[str, ...]:
        scopes = self._scopes.get(key)
        if scopes is None:
            scopes = self._scopes[key] = self._compute_scopes(item.doc)
            if scopes:
                self._epk_partitions[scopes[-1]] = key
        return scopes

    def partition_feed_after(self, key: str, after: int) -> Iterator[tuple[int, Item]]:
        """(lsn, item) of one stored partition above `after`, in LSN order."""
        part = self.partitions.get(key, {})
        return iter(sorted(((i.lsn, i) for i in part.values() if i.lsn > after), key=_first))

    def scope_feed_after(self, scope: str, after: int) -> Iterator[tuple[int, Item]]:
        """(lsn, item) above `after` of an EPK scope: a hierarchical prefix or a whole key."""
        index = self.scoped_feeds.get(scope)
        if index is not None:
            return index.after(after)
        key = self._epk_partitions.get(scope)
        return self.partition_feed_after(key, after) if key is not None else iter(())

    def _compute_scopes(self, doc: dict[str, Any]) -> tuple[str, ...]:
        definition = self.props["partitionKey"]
        if definition.get("version", 1) != 2:
            return ()  # EPK ranges are refused on hash V1 containers
        values = self.pk_from_doc(doc)
        try:
            if definition.get("kind") == "MultiHash":
                parts = [effective_partition_key([v], "MultiHash") for v in values]
                return tuple("".join(parts[: n + 1]) for n in range(len(parts)))
            return (effective_partition_key(values, "Hash"),)
        except ValueError:  # not a key value a request could name: no scoped index
            return ()

    def pk_from_doc(self, doc: dict[str, Any]) -> list[Any]:
        """The document's partition key values; `{}` (Undefined) where a path is missing.

        As in Cosmos (and the SDK's own extraction), an object or array at a key path is not a
        key value either: it counts as Undefined, so such an item goes with `[{}]`.
        """
        if self._pk_segments is None:
            self._pk_segments = [parse_path(path) for path in self.pk_paths]
        values: list[Any] = []
        for segments in self._pk_segments:
            node: Any = doc
            for seg in segments:
                node = node.get(seg, UNDEFINED) if isinstance(node, dict) else UNDEFINED
            values.append({} if node is UNDEFINED or isinstance(node, dict | list) else node)
        return values


def parse_path(path: str) -> list[str]:
    """The property names of a partition key path like `/a/b` or `/"level' 1*()"/"le/vel2"`.

    A segment in double or single quotes may hold `/`; a quote preceded by a backslash does not
    end it. The rules are those of the azure-cosmos SDK's `_base.ParsePaths` (Cosmos does not
    document them). ValueError for a path that does not parse.
    """
    segments: list[str] = []
    index = 0
    while index < len(path):
        if path[index] != "/":
            raise ValueError(f"a path segment must start with '/' (at {index})")
        index += 1
        if index == len(path):
            break
        if path[index] in "\"'":
            quote = path[index]
            end = index + 1
            while True:
                end = path.find(quote, end)
                if end == -1:
                    raise ValueError(f"an unterminated quote (at {index})")
                if path[end - 1] != "\\":
                    break
                end += 1
            segments.append(path[index + 1 : end])
            index = end + 1
        else:
            end = path.find("/", index)
            end = len(path) if end == -1 else end
            segments.append(path[index:end])
            index = end
    if not segments or any(not s for s in segments):
        raise ValueError("a path needs at least one non-empty segment")
    return segments


def item_record(container_rid: str, key: str, item: Item) -> dict[str, Any]:
    """The journal's `i` operation for an item version (see journal.py for the fields)."""
    record: dict[str, Any] = {
        "o": "i",
        "c": container_rid,
        "k": key,
        "d": item.doc,
        "w": item.written_at,
        "s": item.seq,
    }
    if not item.indexed:
        # Only the exception is written: most items are indexed, and every write pays the line.
        record["n"] = False
    return record


def container_record(database_rid: str, coll: Container) -> dict[str, Any]:
    """The journal's `c` operation: a container created, with `n` its range count."""
    record: dict[str, Any] = {
        "o": "c",
        "d": database_rid,
        "p": coll.props,
        "t": coll.throughput,
    }
    if coll.ranges.generation:  # split or merged since: the whole map
        record["m"] = coll.ranges.to_record()
    elif coll.range_count != 1:  # only the exception is written, as with items' `n`
        record["n"] = coll.range_count
    return record


def _first(pair: tuple[int, Item]) -> int:
    return pair[0]


def _lsn_of(item: Item) -> int:
    return item.lsn


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
        self.log: ChangeLog | None = None  # a list while a journal is attached
        self.journal: Committer | None = None
        # Partition key ranges a new container gets at least (`--partition-ranges`).
        self.partition_ranges = 1

    def touch(self) -> None:
        self.lsn += 1

    def record(self, op: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.append(op)

    def start_log(self) -> ChangeLog:
        """From now on every change is recorded; returns the (shared, cleared in place) log."""
        self.log = []
        for db in self.databases.values():
            for coll in db.containers.values():
                coll.log = self.log
        return self.log

    def commit(self) -> None:
        """Make the changes so far durable (when journaling); call before answering.

        Changes are made in memory first; when the journal cannot write them it undoes them
        (`restore`) and raises, so memory never holds what the file lacks."""
        if self.journal is not None:
            self.journal.commit()

    def restore(self, durable: Store) -> None:
        """Take the state of `durable` (the journal replayed): changes not written are gone."""
        self.databases = durable.databases
        self.rids = durable.rids
        self.lsn = durable.lsn
        if self.log is not None:
            self.log.clear()  # shared with the journal: the same list, emptied
            for coll in self.containers():
                coll.log = self.log

    def containers(self) -> list[Container]:
        return [c for d in self.databases.values() for c in d.containers.values()]

    def set_throughput(self, rid: str, throughput: int) -> None:
        for db in self.databases.values():
            if db.props["_rid"] == rid:
                db.throughput = throughput
            for coll in db.containers.values():
                if coll.rid == rid:
                    coll.throughput = throughput
        self.touch()
        self.record({"o": "t", "r": rid, "t": throughput})

    def split_range(self, db_name: str, coll_name: str, range_id: str) -> tuple[str, str]:
        """Split a container's live range (RangeError when it cannot be); the children's ids."""
        return self.find_container(db_name, coll_name).split_range(range_id)

    def merge_ranges(self, db_name: str, coll_name: str, first: str, second: str) -> str:
        """Merge two adjacent live ranges of a container (RangeError when they are not)."""
        return self.find_container(db_name, coll_name).merge_ranges(first, second)

    def split_for_throughput(self, rid: str, throughput: int) -> list[str]:
        """Split the container `rid`'s widest ranges until it has one per 10,000 RU/s of
        `throughput`, as Cosmos adds physical partitions when throughput outgrows them (it
        never merges when throughput falls); the ids of the ranges split."""
        split: list[str] = []
        coll = next((c for c in self.containers() if c.rid == rid), None)
        if coll is None or not coll.ranges.hashed:
            return split
        while coll.range_count < ranges_for_throughput(throughput):
            widest = max(coll.ranges.live, key=lambda r: range_width(r))
            coll.split_range(widest.id)
            split.append(widest.id)
        return split

    # -- databases -----------------------------------------------------------------------
    def find_database(self, name: str) -> Database:
        db = self.databases.get(name)
        if db is None:
            db = next((d for d in self.databases.values() if d.props["_rid"] == name), None)
        if db is None:
            raise not_found(f"database {name[:300]!r}")
        return db

    def create_database(self, body: object, throughput: int | None = None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("Database body must be a JSON object.")
        name = validate_id(body.get("id"), "database id")
        if name in self.databases:
            raise conflict(f"database {name!r}")
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
        self.databases[name] = Database(props, throughput=throughput)
        self.touch()
        self.record({"o": "db", "p": props, "t": throughput})
        return props

    def delete_database(self, name: str) -> None:
        db = self.find_database(name)
        del self.databases[db.props["id"]]
        self.touch()
        self.record({"o": "db-", "r": db.props["_rid"]})

    # -- containers ----------------------------------------------------------------------
    def find_container(self, db_name: str, name: str) -> Container:
        db = self.find_database(db_name)
        coll = db.containers.get(name)
        if coll is None:
            coll = next((c for c in db.containers.values() if c.rid == name), None)
        if coll is None:
            raise not_found(f"container {name[:300]!r} in database {db.props['id']!r}")
        return coll

    def create_container(
        self, db_name: str, body: object, throughput: int | None = None, ranges: int = 1
    ) -> dict[str, Any]:
        db = self.find_database(db_name)
        if not isinstance(body, dict):
            raise bad_request("Container body must be a JSON object.")
        name = validate_id(body.get("id"), "container id")
        # Cosmos checks the definition before the name: a bad one is a 400 even for a taken id.
        partition_key = partition_key_definition(body.get("partitionKey"))
        indexing_policy = complete_indexing_policy(body.get("indexingPolicy"))
        if name in db.containers:
            raise conflict(f"container {name!r}")
        rid = self.rids.child(db.props["_rid"], 4)
        props = {
            "id": name,
            "indexingPolicy": indexing_policy,
            "partitionKey": partition_key,
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
        coll = Container(props, throughput=throughput, log=self.log, range_count=ranges)
        db.containers[name] = coll
        self.touch()
        self.record(container_record(db.props["_rid"], coll))
        return props

    def replace_container(self, db_name: str, name: str, body: object) -> dict[str, Any]:
        coll = self.find_container(db_name, name)
        if not isinstance(body, dict):
            raise bad_request("Container body must be a JSON object.")
        if body.get("id") != coll.props["id"]:
            raise bad_request("The container id in the body does not match the URL.")
        if (
            "partitionKey" in body
            and partition_key_definition(body["partitionKey"])["paths"]
            != coll.props["partitionKey"]["paths"]
        ):
            raise bad_request("The partition key of a container cannot be changed.")
        props = dict(coll.props)
        if body.get("indexingPolicy"):
            props["indexingPolicy"] = complete_indexing_policy(body["indexingPolicy"])
        props.pop("defaultTtl", None)
        _apply_mutable_container_props(props, body)
        props["_etag"] = new_etag()
        props["_ts"] = int(time.time())
        coll.props = props
        self.touch()
        self.record({"o": "c~", "r": coll.rid, "p": props})
        return props

    def delete_container(self, db_name: str, name: str) -> None:
        db = self.find_database(db_name)
        coll = self.find_container(db_name, name)
        del db.containers[coll.props["id"]]
        self.touch()
        self.record({"o": "c-", "r": coll.rid})

    def purge_expired(self) -> int:
        now = time.time()
        with self.lock:
            return sum(c.purge_expired(now) for c in self.containers())


class Committer(Protocol):
    """The journal as the store sees it: `out_of_sync` when memory may hold changes the file
    lacks (then nothing is answered)."""

    out_of_sync: str | None

    def commit(self) -> None: ...


def partition_key_definition(raw: object) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("paths"), list) or not raw["paths"]:
        raise bad_request("A container needs a partitionKey definition with 'paths'.")
    paths = raw["paths"]
    kind = raw.get("kind", "Hash")
    for path in paths:
        try:
            if not isinstance(path, str):
                raise ValueError("not a string")
            parse_path(path)
        except ValueError as exc:
            raise bad_request(
                f"The partition key path {str(path)[:100]!r} is invalid ({exc}); paths look like "
                """'/property', '/a/b' or '/"quoted name"'."""
            ) from None
    if kind == "Hash" and len(paths) != 1:
        raise bad_request("A Hash partition key has exactly one path.")
    if kind == "MultiHash" and not 1 <= len(paths) <= 3:
        raise bad_request(
            f"The partition key definition has {len(paths)} paths; a MultiHash (hierarchical) "
            "partition key has one to three."
        )
    if kind not in ("Hash", "MultiHash"):
        raise unsupported(f"partition key kind {kind!r}")
    return {"paths": list(paths), "kind": kind, "version": raw.get("version", 2)}


# What Cosmos adds to an indexing policy it is given (observed on the service and asserted by
# the azure-cosmos SDK's own container tests): consistent mode, automatic, every path included,
# `_etag` excluded; the legacy per-path `indexes` are dropped. Mode `none` indexes nothing.
_ETAG_PATH = '/"_etag"/?'


def complete_indexing_policy(raw: object) -> dict[str, Any]:
    """The policy as Cosmos stores and returns it: `raw` completed with the defaults."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise bad_request("indexingPolicy must be a JSON object.")
    policy = dict(raw)
    mode = policy.get("indexingMode", "consistent")
    if not isinstance(mode, str) or mode.lower() not in ("consistent", "lazy", "none"):
        raise bad_request("indexingPolicy.indexingMode must be 'consistent', 'lazy' or 'none'.")
    policy["indexingMode"] = mode.lower()
    if policy["indexingMode"] == "none":
        policy.setdefault("automatic", False)
        policy.setdefault("includedPaths", [])
        policy.setdefault("excludedPaths", [])
        return policy
    policy.setdefault("automatic", True)
    included = policy.get("includedPaths") or [{"path": "/*"}]
    excluded = policy.get("excludedPaths") or []
    if not isinstance(included, list) or not isinstance(excluded, list):
        raise bad_request("indexingPolicy includedPaths and excludedPaths must be arrays.")
    if any(
        not isinstance(p, dict) or not isinstance(p.get("path"), str) for p in included + excluded
    ):
        raise bad_request("Every included and excluded path must be an object with a 'path'.")
    policy["includedPaths"] = [{k: v for k, v in p.items() if k != "indexes"} for p in included]
    policy["excludedPaths"] = [dict(p) for p in excluded]
    if all(p["path"] != _ETAG_PATH for p in policy["excludedPaths"]):
        policy["excludedPaths"].append({"path": _ETAG_PATH})
    return policy


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
