"""Request hash: SHA-256 over the RFC 8785 (JCS) canonical JSON of a validated payload."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def request_hash(canonical_payload: dict[str, Any]) -> str:
    """Hex SHA-256 of the JCS form, so key order, whitespace and number spelling never matter."""
    return hashlib.sha256(rfc8785.dumps(canonical_payload)).hexdigest()
