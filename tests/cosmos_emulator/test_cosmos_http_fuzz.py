"""A fuzz of the request parser and everything behind it, over raw sockets.

Requests are built from Cosmos-shaped parts (signed, so they reach the document code), then
their framing, headers, bodies and SQL text are mutated. Every answer must be a well-formed
HTTP response with a strict JSON body (or nothing, when the framing leaves the request
unfinished), never a 500; afterwards the real SDK must still be served.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

import pytest
from azure.cosmos import CosmosClient, PartitionKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_http import parse_responses, read_until_closed

from cosmos_emulator import WELL_KNOWN_KEY, start_in_background
from cosmos_emulator.auth import authorization_header, resource_of

DB, COLL = "fuzz", "c"
DOCS = f"/dbs/{DB}/colls/{COLL}/docs"
PATHS = [
    "/",
    "/dbs",
    f"/dbs/{DB}",
    f"/dbs/{DB}/colls",
    f"/dbs/{DB}/colls/{COLL}",
    DOCS,
    f"{DOCS}/1",
    f"{DOCS}/missing",
    f"/dbs/{DB}/colls/{COLL}/pkranges",
    "/offers",
    "/_emulator/health",
    "/_emulator/faults",
    "/_emulator/ranges",
    "/dbs/%ff/colls/%00",
    "http://[broken/",
]
SQL_TOKENS = [
    "SELECT", "VALUE", "*", "FROM", "c", "WHERE", "AND", "OR", "NOT", "IN", "BETWEEN",
    "ORDER BY", "c.id", "c.v", "c['x']", "c.a.b", "(", ")", "[", "]", "{", "}", ",", ":",
    "=", "!=", "<", ">=", "+", "-", "*", "/", "%", "||", "@p", "@", "1", "-1", "1.5e3",
    "1e400", "9" * 400, "'s'", "'\\u12'", '"\\"', "LOWER(", "COUNT(", "IS_DEFINED(",
    "true", "null", "undefined", "TOP 2", "OFFSET 1 LIMIT 1", "DISTINCT", "JOIN", "--",
]  # fmt: skip
HEADER_NAMES = [
    "x-ms-documentdb-partitionkey",
    "x-ms-documentdb-isquery",
    "x-ms-cosmos-is-query-plan-request",
    "x-ms-cosmos-is-batch-request",
    "x-ms-documentdb-is-upsert",
    "x-ms-max-item-count",
    "x-ms-continuation",
    "x-ms-offer-throughput",
    "x-ms-cosmos-offer-autopilot-settings",
    "x-ms-start-epk",
    "x-ms-documentdb-partitionkeyrangeid",
    "A-IM",
    "If-Modified-Since",
    "If-Match",
    "If-None-Match",
    "Content-Type",
    "Expect",
    "Connection",
    "Transfer-Encoding",
    "Content-Length",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from([10**400, "[" * 300]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
sql_text = st.lists(st.sampled_from(SQL_TOKENS), max_size=25).map(" ".join) | st.sampled_from(
    ["SELECT * FROM c", "SELECT VALUE COUNT(1) FROM c", "SELECT * FROM c ORDER BY c.id"]
)
pk_header = st.sampled_from(['["a"]', '["b"]', "[]", "[{}]", '["a"', "[NaN]", "[" * 400]) | (
    json_values.map(lambda v: json.dumps([v]))
)


def _item() -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"id": st.sampled_from(["1", "2", "", "a/b"]) | st.text(max_size=5), "pk": st.just("a")},
        optional={"v": json_values, "ttl": st.integers(-2, 5)},
    )


bodies = st.one_of(
    st.none(),
    _item(),
    json_values,
    st.builds(
        lambda q, v: {"query": q, "parameters": [{"name": "@p", "value": v}]}, sql_text, json_values
    ),
    st.builds(
        lambda ops, cond: {"operations": ops, "condition": cond},
        st.lists(
            st.fixed_dictionaries(
                {
                    "op": st.sampled_from(["set", "add", "replace", "remove", "incr", "move", "x"]),
                    "path": st.sampled_from(["/v", "/v/0", "/v/\u00b2", "/id", "/", "x", "/a/b"]),
                    "value": json_values,
                }
            ),
            max_size=3,
        ),
        st.none() | sql_text.map(lambda t: "FROM c WHERE " + t),
    ),
    st.lists(
        st.fixed_dictionaries(
            {
                "operationType": st.sampled_from(["Create", "Upsert", "Read", "Patch", "Bogus"]),
                "id": st.sampled_from(["1", "2"]),
                "resourceBody": _item(),
            },
            optional={"partitionKey": pk_header},
        ),
        max_size=3,
    ),
    st.sampled_from(["status", "count"]).flatmap(lambda k: json_values.map(lambda v: {k: v})),
)


@dataclass
class Fuzzed:
    raw: bytes
    method: str


# One date for the whole run: the signature (and so the request's length, which bounds later
# draws) must not change between hypothesis replaying an example and first drawing it. The run
# lasts seconds, well inside the emulator's allowed clock skew.
SIGNED_AT = formatdate(usegmt=True)
# The fault endpoint's token: requests to it carry it, so they reach the rule parser.
FAULT_TOKEN = "fuzz-fault-token-0123456789"


@st.composite
def requests(draw: st.DrawFn) -> Fuzzed:
    method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "G:T"]))
    path = draw(st.sampled_from(PATHS))
    if method in ("DELETE", "PUT") and not path.startswith(DOCS):
        method = "GET"  # keep the fuzzed container alive for the examples after this one
    body_value = draw(bodies)
    body = b"" if body_value is None else json.dumps(body_value).encode()
    if draw(st.booleans()) and body:  # mutate the body's bytes
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.binary(max_size=4)) + body[at + draw(st.integers(0, 3)) :]
    headers: dict[str, str] = {"Host": "x", "x-ms-date": SIGNED_AT}
    segments = [s for s in path.split("/") if s] if path.startswith("/") else []
    resource_type, link = resource_of(segments)
    if draw(st.integers(0, 9)) and path.startswith("/_emulator/"):
        headers["authorization"] = f"Bearer {FAULT_TOKEN}"
        headers["Content-Type"] = "application/json"
    elif draw(st.integers(0, 9)):  # mostly signed, so requests reach the code behind auth
        headers["authorization"] = authorization_header(
            WELL_KNOWN_KEY, method, resource_type, link, headers["x-ms-date"]
        )
    if path.startswith(DOCS):
        headers["x-ms-documentdb-partitionkey"] = draw(pk_header)
    for name in draw(st.lists(st.sampled_from(HEADER_NAMES), max_size=4)):
        headers[name] = draw(
            st.sampled_from(["true", "True", "application/query+json", "100-continue", "close",
                             "chunked", "gzip", "-1", "5", "+5", "x" * 50, '"etag"', "",
                             "Incremental feed", "Full-Fidelity Feed", "*", '"3"', "0",
                             "Mon, 01 Jan 99999999999 00:00:00 GMT"])
            | pk_header
            | st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)
        )  # fmt: skip
    framing = draw(st.sampled_from(["length", "chunked", "short", "long", "none"]))
    if framing == "chunked" or headers.get("Transfer-Encoding") == "chunked":
        headers.pop("Content-Length", None)
        headers["Transfer-Encoding"] = "chunked"
        size = max(1, draw(st.integers(1, 64)))
        pieces = [body[i : i + size] for i in range(0, len(body), size)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    else:
        declared = {"length": len(body), "short": max(0, len(body) - 1), "long": len(body) + 5}
        if framing in declared:
            headers.setdefault("Content-Length", str(declared[framing]))
        payload = body
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    raw = head.encode("utf-8") + b"\r\n" + payload
    if draw(st.integers(0, 4)) == 0:  # mutate the framing itself
        at = draw(st.integers(0, len(raw)))
        raw = (
            raw[:at]
            + draw(st.sampled_from([b"\r\n", b"\n", b":", b" ", b"\x00", b"0\r\n"]))
            + raw[at:]
        )
    return Fuzzed(raw, method)


def check_answer(raw: bytes) -> None:
    """A well-formed HTTP response with strict JSON (or nothing at all), never a 500."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in a response body")

    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    raw = raw.replace(interim, b"")
    for response in parse_responses(raw):
        assert response.status != 500, response.body[:500]
        assert 200 <= response.status < 600, response.status
        if response.body:
            json.loads(response.body, parse_constant=refuse)
        else:
            assert response.status in (200, 201, 204, 304), response.status


FUZZ_SETTINGS = settings(
    max_examples=600,
    deadline=None,
    derandomize=True,  # the same examples on every run: a CI failure is reproducible
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def send(port: int, request: Fuzzed) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(request.raw)
            sock.shutdown(socket.SHUT_WR)  # unfinished framing then ends in a clean close
        except OSError:
            pass  # the server already answered and closed
        return read_until_closed(sock, deadline_s=10)


@pytest.mark.slow
def test_fuzzed_requests_get_well_formed_answers_and_the_sdk_is_served_after() -> None:
    # The fuzzed requests name the host `x`: served here, so they reach the code behind it.
    with start_in_background("127.0.0.1", 0, allowed_hosts=["x"], fault_token=FAULT_TOKEN) as emu:
        client = CosmosClient(emu.url, emu.key)
        container = client.create_database(DB).create_container(
            COLL, PartitionKey("/pk"), default_ttl=-1
        )
        container.create_item({"id": "1", "pk": "a", "v": [1, 2], "a": {"b": 1}})
        container.create_item({"id": "2", "pk": "b", "v": 1.5})

        @FUZZ_SETTINGS
        @given(request=requests())
        def fuzz(request: Fuzzed) -> None:
            check_answer(send(emu.port, request))

        fuzz()
        emu.clear_faults()  # a fuzzed rule that parsed is a rule: it is no failure to serve
        after = client.create_database("after").create_container("c", PartitionKey("/pk"))
        after.create_item({"id": "x", "pk": "a"})
        found = [d["id"] for d in after.query_items("SELECT * FROM c", partition_key="a")]
        assert found == ["x"]
