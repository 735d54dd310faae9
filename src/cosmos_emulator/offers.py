"""Throughput offers: stored per database or container, returned and replaceable, not enforced."""

from __future__ import annotations

from typing import Any

from .errors import CosmosError, bad_request, not_found
from .http11 import Request, Response
from .protocol import feed_response, is_query, json_body, json_response, query_response
from .store import Store
from .untrusted_json import parse_json

DEFAULT_THROUGHPUT = 400
MIN_THROUGHPUT = 400


def requested_throughput(request: Request) -> int | None:
    raw = request.headers.get("x-ms-offer-throughput")
    autoscale = request.headers.get("x-ms-cosmos-offer-autopilot-settings")
    try:
        if raw:
            return int(raw)
        if autoscale:
            return int(parse_json(autoscale, "The autoscale header")["maxThroughput"])
    except (CosmosError, ValueError, KeyError, TypeError):
        raise bad_request("Invalid throughput header.") from None
    return None


def offer_list(store: Store) -> list[dict[str, Any]]:
    offers = []
    for db in store.databases.values():
        owners: list[tuple[dict[str, Any], int | None]] = [(db.props, db.throughput)]
        owners += [(c.props, c.throughput) for c in db.containers.values()]
        for props, throughput in owners:
            if throughput is None:
                continue
            rid = props["_rid"]
            offers.append(
                {
                    "id": rid,
                    "_rid": rid,
                    "_self": f"offers/{rid}/",
                    "_etag": props["_etag"],
                    "_ts": props["_ts"],
                    "offerType": "Invalid",
                    "offerVersion": "V2",
                    "resource": props["_self"],
                    "offerResourceId": rid,
                    "content": {
                        "offerThroughput": throughput,
                        "offerIsRUPerMinuteThroughputEnabled": False,
                    },
                }
            )
    return offers


def handle_offers(request: Request, seg: list[str], store: Store) -> Response:
    offers = offer_list(store)
    if len(seg) == 1 and request.method == "GET":
        return feed_response(request, "Offers", "", offers)
    if len(seg) == 1 and request.method == "POST" and is_query(request):
        return query_response(request, "Offers", "", offers)
    offer = next((o for o in offers if len(seg) == 2 and o["id"] == seg[1]), None)
    if offer is None:
        raise not_found("offer")
    if request.method == "GET":
        return json_response(200, offer)
    if request.method != "PUT":
        raise CosmosError(405, "MethodNotAllowed", "Offers can only be read and replaced.")
    body = json_body(request)
    throughput = body.get("content", {}).get("offerThroughput") if isinstance(body, dict) else None
    if not isinstance(throughput, int) or throughput < MIN_THROUGHPUT:
        raise bad_request(f"content.offerThroughput must be an integer >= {MIN_THROUGHPUT}.")
    store.set_throughput(offer["id"], throughput)
    # Past 10,000 RU/s per physical partition the container's ranges split (ranges.py).
    store.split_for_throughput(offer["id"], throughput)
    return json_response(
        200, {**offer, "content": {**offer["content"], "offerThroughput": throughput}}
    )
