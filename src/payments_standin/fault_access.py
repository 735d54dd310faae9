"""Who may use the fault switches (`/faults`) and move money (`POST /payments`, `POST /refunds`):
a caller holding the route's token, never a web page. Each has a token of its own: the payment
client of the app holds the money token (`orders up` hands it over as `PAYMENTS_TOKEN`), the
operator the fault token, so neither can do the other's part.

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
MONEY_TOKEN_ENV = "PAYMENTS_STANDIN_TOKEN"
# What fits `Authorization: Bearer` (RFC 6750 token68), long enough not to be guessed.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
JSON_MEDIA_TYPE = "application/json"
DEFAULT_HTTP_PORT = 80


def new_fault_token() -> str:
    return secrets.token_urlsafe(32)


def checked_fault_token(text: str) -> str:
    """`text` when it can be a token; ValueError saying what one looks like otherwise."""
    return _checked_token(text, f"a fault token ({FAULT_TOKEN_ENV} or --fault-token)")


def checked_money_token(text: str) -> str:
    """`text` when it can be the money routes' token; ValueError otherwise."""
    return _checked_token(text, f"a payments token ({MONEY_TOKEN_ENV} or --token)")


def _checked_token(text: str, what: str) -> str:
    if TOKEN_SHAPE.fullmatch(text) is None:
        raise ValueError(f"{what} is 16 to 256 characters of A-Z a-z 0-9 . _ ~ + / = -")
    return text


@dataclass(frozen=True)
class FaultRefusal:
    status: int
    slug: str
    detail: str
    headers: dict[str, str]


@dataclass(frozen=True)
class GuardedRoutes:
    """What a set of guarded routes is called in refusals, and where its token comes from."""

    what: str  # "a fault request", "a charge or refund"
    token_slug: str  # the problem type of a missing or wrong token
    token_source: str  # where the caller finds the token
    realm: str
    body: str  # what the request's body is, for the media-type refusal


FAULT_ROUTES = GuardedRoutes(
    "a fault request",
    "fault-token-required",
    f"the token the stand-in was started with ({FAULT_TOKEN_ENV}), or the one it printed at start",
    "faults",
    "a fault rule",
)
MONEY_ROUTES = GuardedRoutes(
    "a charge or refund",
    "payments-token-required",
    f"the token the stand-in was started with ({MONEY_TOKEN_ENV}; the app's PAYMENTS_TOKEN under "
    "`orders up`), or the one it printed at start",
    "payments",
    "a charge or refund",
)


def request_refusal(
    routes: GuardedRoutes,
    token: str,
    hosts: AllowedHosts,
    *,
    origins: list[str],
    authorizations: list[str],
    content_types: list[str] | None,
) -> FaultRefusal | None:
    """Why this request may not use `routes`, or None when it may (the module's three checks).

    `content_types` is None for a request without a body (GET, DELETE)."""
    if origins and not (len(origins) == 1 and _own_origin(origins[0].strip(), hosts)):
        return FaultRefusal(
            403,
            "foreign-origin",
            f"{routes.what} from a web page of another origin is refused; "
            "send it from a tool, without Origin",
            {},
        )
    if len(authorizations) != 1 or not _bearer_matches(authorizations[0], token):
        return FaultRefusal(
            401,
            routes.token_slug,
            f"{routes.what} needs `Authorization: Bearer <token>`: {routes.token_source}",
            {"WWW-Authenticate": f'Bearer realm="{routes.realm}"'},
        )
    if content_types is not None and not (
        len(content_types) == 1 and _media_type(content_types[0]) == JSON_MEDIA_TYPE
    ):
        return FaultRefusal(
            415,
            "unsupported-media-type",
            f"{routes.body} is sent as `Content-Type: {JSON_MEDIA_TYPE}`",
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
