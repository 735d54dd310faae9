"""Master-key request signatures, verified the way Cosmos DB checks them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

from .errors import CosmosError

WELL_KNOWN_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
)


def resource_of(segments: list[str]) -> tuple[str, str]:
    """(resource type, resource link) as the SDK signs them for a request path."""
    if not segments:
        return "", ""
    if len(segments) >= 6 and segments[4] == "operations":
        # Partition-key delete is signed as an operation on its container.
        return "colls", "/".join(segments[:4])
    if len(segments) % 2 == 1:
        return segments[-1], "/".join(segments[:-1])
    return segments[-2], "/".join(segments)


def sign(key: str, verb: str, resource_type: str, resource_link: str, date: str) -> str:
    text = f"{verb.lower()}\n{resource_type.lower()}\n{resource_link}\n{date.lower()}\n\n"
    digest = hmac.new(base64.b64decode(key), text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def authorization_header(key: str, verb: str, resource_type: str, link: str, date: str) -> str:
    token = f"type=master&ver=1.0&sig={sign(key, verb, resource_type, link, date)}"
    return urllib.parse.quote(token, "-_.!~*'()")


def _unauthorized(message: str) -> CosmosError:
    return CosmosError(401, "Unauthorized", message)


def verify(key: str, verb: str, segments: list[str], headers: dict[str, str]) -> None:
    raw = headers.get("authorization")
    if not raw:
        raise _unauthorized("Required Header authorization is missing.")
    fields = dict(
        part.split("=", 1) for part in urllib.parse.unquote(raw).split("&") if "=" in part
    )
    if fields.get("type") != "master":
        raise _unauthorized("Only master-key authorization is supported by this emulator.")
    date = headers.get("x-ms-date") or headers.get("date") or ""
    if not date:
        raise _unauthorized("Required Header x-ms-date is missing.")
    resource_type, link = resource_of(segments)
    given = fields.get("sig", "")
    candidates = {link}
    if segments:
        # Rid-based links (offers, or database names that look like an 8-char rid) are signed
        # by the SDK as the last resource id alone, lower-cased.
        last_id = (
            segments[-1] if len(segments) % 2 == 0 else segments[-2] if len(segments) > 1 else ""
        )
        candidates |= {link.lower(), last_id.lower()}
    for candidate in candidates:
        expected = sign(key, verb, resource_type, candidate, date)
        if hmac.compare_digest(expected, given):
            return
    raise _unauthorized(
        "The input authorization token can't serve the request. The wrong key is being used "
        "or the expected payload is not built as per the protocol."
    )
