"""Who may use the fault switches (`/_emulator/faults`): a caller holding the token, never a
web page.

Any page open in the developer's browser can send a "simple" cross-site request (a form post,
or `fetch` with `mode: 'no-cors'` and `Content-Type: text/plain`) to 127.0.0.1; the browser
sends it without asking, and only hides the answer. The `Host` check (hosts.py) does not stop
that: the page addresses the emulator by its own name. So a fault request must
- carry no foreign `Origin` (a browser names the page's origin on every cross-site POST),
- carry `Authorization: Bearer <token>` (a page cannot add that header without a CORS
  preflight, which the emulator never grants, and cannot know the token), and
- when it has a body, send it as `application/json` (not a simple content type either).
The data plane needs no such guard: its requests carry a signed `Authorization` and
`x-ms-date`, which a page cannot send without a preflight either.
"""

from __future__ import annotations

import hmac
import re
import secrets

from .errors import CosmosError
from .hosts import HostAllowList

FAULT_TOKEN_ENV = "COSMOS_EMULATOR_FAULT_TOKEN"
# What fits `Authorization: Bearer` (RFC 6750 token68), long enough not to be guessed.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
JSON_MEDIA_TYPE = "application/json"


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


def fault_request_refusal(
    token: str, hosts: HostAllowList | None, scheme: str, headers: dict[str, str], has_body: bool
) -> CosmosError | None:
    """Why this request may not touch the fault switches, or None when it may. `headers` have
    lower-case names; a header sent twice arrives as one comma-joined value, which no check
    accepts."""
    origin = headers.get("origin")
    if origin is not None and not (hosts is not None and hosts.allows_origin(origin, scheme)):
        return CosmosError(
            403,
            "Forbidden",
            "A fault request from a web page of another origin is refused; "
            "send it from a tool, without Origin.",
        )
    if not _bearer_matches(headers.get("authorization", ""), token):
        return CosmosError(
            401,
            "Unauthorized",
            "The fault switches need `Authorization: Bearer <token>`: the token the emulator "
            f"was started with ({FAULT_TOKEN_ENV}), or the one it printed at start.",
            headers={"WWW-Authenticate": 'Bearer realm="faults"'},
        )
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if has_body and content_type != JSON_MEDIA_TYPE:
        return CosmosError(
            415,
            "UnsupportedMediaType",
            f"A fault rule is sent as `Content-Type: {JSON_MEDIA_TYPE}`.",
        )
    return None


def _bearer_matches(header: str, token: str) -> bool:
    scheme, _, presented = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )
