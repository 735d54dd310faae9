"""Who may use the fault switches (`/faults`): a caller holding the token, never a web page.

Any page open in the developer's browser can send a "simple" cross-site request (a form post,
or `fetch` with `mode: 'no-cors'` and `Content-Type: text/plain`) to 127.0.0.1; the browser
sends it without asking, and only hides the answer. The `Host` check (hosts.py) does not stop
that: the page addresses this server by its own name. So a fault request must
- carry no foreign `Origin` (a browser names the page's origin on every cross-site POST),
- carry `Authorization: Bearer <token>` (a page cannot add that header without a CORS
  preflight, which this server never grants, and cannot know the token), and
- when it has a body, send it as `application/json` (not a simple content type either).
Each check alone would stop a page; together they also stop a local process that does not hold
the token.
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass

from .hosts import AllowedHosts, authority
from .validation import InvalidInput

FAULT_TOKEN_ENV = "PAYMENTS_STANDIN_FAULT_TOKEN"
# What fits `Authorization: Bearer` (RFC 6750 token68), long enough not to be guessed.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
JSON_MEDIA_TYPE = "application/json"
DEFAULT_HTTP_PORT = 80


def new_fault_token() -> str:
    return secrets.token_urlsafe(32)


def checked_fault_token(text: str) -> str:
    """`text` when it can be a token; ValueError saying what one looks like otherwise."""
    if TOKEN_SHAPE.fullmatch(text) is None:
        raise ValueError(
            "a fault token is 16 to 256 characters of A-Z a-z 0-9 . _ ~ + / = -"
            f" ({FAULT_TOKEN_ENV} or --fault-token)"
        )
    return text


@dataclass(frozen=True)
class FaultRefusal:
    status: int
    slug: str
    detail: str
    headers: dict[str, str]


def fault_request_refusal(
    token: str,
    hosts: AllowedHosts,
    *,
    origins: list[str],
    authorizations: list[str],
    content_types: list[str] | None,
) -> FaultRefusal | None:
    """Why this request may not touch the fault switches, or None when it may.

    `content_types` is None for a request without a body (GET, DELETE)."""
    if origins and not (len(origins) == 1 and _own_origin(origins[0].strip(), hosts)):
        return FaultRefusal(
            403,
            "foreign-origin",
            "a fault request from a web page of another origin is refused; "
            "send it from a tool, without Origin",
            {},
        )
    if len(authorizations) != 1 or not _bearer_matches(authorizations[0], token):
        return FaultRefusal(
            401,
            "fault-token-required",
            "the fault switches need `Authorization: Bearer <token>`: the token the stand-in "
            f"was started with ({FAULT_TOKEN_ENV}), or the one it printed at start",
            {"WWW-Authenticate": 'Bearer realm="faults"'},
        )
    if content_types is not None and not (
        len(content_types) == 1 and _media_type(content_types[0]) == JSON_MEDIA_TYPE
    ):
        return FaultRefusal(
            415,
            "unsupported-media-type",
            f"a fault rule is sent as `Content-Type: {JSON_MEDIA_TYPE}`",
            {},
        )
    return None


def _own_origin(origin: str, hosts: AllowedHosts) -> bool:
    """`http://NAME[:PORT]` of a host and port this server serves (`null`, another scheme or
    another name is foreign)."""
    scheme, separator, rest = origin.partition("://")
    if separator == "" or scheme.lower() != "http":
        return False
    try:
        return authority(rest, DEFAULT_HTTP_PORT) in hosts.served
    except InvalidInput:
        return False


def _bearer_matches(header: str, token: str) -> bool:
    scheme, _, presented = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()
