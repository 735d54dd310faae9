"""`Idempotency-Key` for HTTP APIs (FastAPI; the `fastapi` extra): the dependency that claims
a request's key, replays its recorded response and refuses a reused or concurrent one as an
RFC 9457 problem, and the pieces an application's own endpoints reuse (the header's name and
bounds, the problem type; the key's own limits and validation, which need no FastAPI, are
`exactly_once.keys`).

    keys = IdempotencyKeys(store, scope="greetings")
    answer_problems(app)

See `exactly_once._idempotency_key` for the flow; this module is its public face.
"""

from __future__ import annotations

from exactly_once._idempotency_key import (
    DEFAULT_MAX_REQUEST_BYTES,
    DescribeRequest,
    IdempotencyKeys,
    KeyClaim,
    KeyedRequest,
    KeyProblem,
    answer_problems,
    problem_response,
    request_fingerprint,
    validate_key,
)
from exactly_once._problems import PROBLEM_JSON, REPLAYED_HEADER, Problem

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "PROBLEM_JSON",
    "REPLAYED_HEADER",
    "DescribeRequest",
    "IdempotencyKeys",
    "KeyClaim",
    "KeyProblem",
    "KeyedRequest",
    "Problem",
    "answer_problems",
    "problem_response",
    "request_fingerprint",
    "validate_key",
]
