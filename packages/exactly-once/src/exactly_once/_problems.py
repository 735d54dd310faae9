"""The refusals of an `Idempotency-Key` endpoint as problem details (RFC 9457, formerly 7807),
from one table for every HTTP host.

draft-ietf-httpapi-idempotency-key-header-07 §2.7 answers a missing key with 400, a key
reused with another payload with 422 and a retry while the first request is in flight with
409, each with a problem body. The core's FastAPI dependency (`idempotency_key.py`) and the
orders API both build their answers from the constructors below, so the two cannot drift: the
same status, `type`, `title` and headers for the same refusal. Framework-free: a host renders
`Problem.body()` as `application/problem+json` with `Problem.headers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exactly_once._records import JsonObject
from exactly_once.keys import HEADER, MAX_KEY_LENGTH, KeyFault

PROBLEM_JSON = "application/problem+json"
# Marks a replayed response, as Stripe does (the draft leaves the marking to the server).
REPLAYED_HEADER = "Idempotent-Replayed"
# RFC 9457 §3.1.1: `type` is a URI reference; a URN names the problem without promising a page.
DEFAULT_TYPE_PREFIX = "urn:exactly-once:problem:"


@dataclass(frozen=True)
class Problem:
    """One refusal: its status, the last part of its `type` (`slug`), a `title` that is the
    same for every occurrence of the problem, and a `detail` about this one."""

    status: int
    slug: str
    title: str
    detail: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def body(self, type_prefix: str = DEFAULT_TYPE_PREFIX) -> JsonObject:
        """The problem details object (RFC 9457 §3.1), its `type` under `type_prefix`."""
        return {
            "type": type_prefix + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }


def missing_key(detail: str = f"the {HEADER} header is required") -> Problem:
    """§2.7: a required key is missing (or empty)."""
    return Problem(400, "missing-idempotency-key", f"{HEADER} required", detail)


def invalid_key(
    detail: str = f"the {HEADER} must be 1..{MAX_KEY_LENGTH} printable ASCII characters",
) -> Problem:
    """A key that breaks the key's rules, or §2.1's one header field sent more than once."""
    return Problem(400, "invalid-idempotency-key", f"Invalid {HEADER}", detail)


def key_fault_problem(fault: KeyFault, detail: str | None = None) -> Problem:
    """The problem of a key refused for `fault` (`exactly_once.keys.key_fault`)."""
    if fault is KeyFault.MISSING:
        return missing_key() if detail is None else missing_key(detail)
    return invalid_key() if detail is None else invalid_key(detail)


def key_reused(detail: str = f"the {HEADER} was first used with another request") -> Problem:
    """§2.7: the key was first used with another payload (another fingerprint, §2.4)."""
    return Problem(422, "idempotency-key-reused", f"{HEADER} reused", detail)


def request_in_progress(
    retry_after_seconds: int,
    detail: str = f"a request with this {HEADER} is in progress; retry later",
) -> Problem:
    """§2.7: the first request under the key is still in flight; `Retry-After` says when to
    come back (RFC 9110 §10.2.3)."""
    return Problem(
        409,
        "request-in-progress",
        f"A request with this {HEADER} is in progress",
        detail,
        headers={"Retry-After": str(retry_after_seconds)},
    )


def response_not_recorded(
    retry_after_seconds: int,
    detail: str = (
        f"the request ran but its response could not be recorded; retry with the same {HEADER}"
    ),
) -> Problem:
    """The request ran, then the store failed to record its response (RFC 9110 §15.6.4, with
    `Retry-After`). Not a 500: the key stays claimed in progress, so the retry with the same
    key gets the recorded response (or a 409 while it is not recorded yet), never a second
    run."""
    return Problem(
        503,
        "response-not-recorded",
        "The response could not be recorded",
        detail,
        headers={"Retry-After": str(retry_after_seconds)},
    )


def body_too_large(detail: str) -> Problem:
    """RFC 9110 §15.5.14: the body is over the endpoint's limit (refused before it is hashed)."""
    return Problem(413, "body-too-large", "Body too large", detail)


def invalid_content_length(detail: str) -> Problem:
    """A `Content-Length` that is not one decimal number (RFC 9110 §8.6)."""
    return Problem(400, "invalid-content-length", "Invalid Content-Length", detail)
