"""Resource ids (`_rid`), ETags and the validation rules Cosmos applies to names and ids."""

from __future__ import annotations

import base64
import threading
import uuid

from .errors import CosmosError, bad_request

MAX_ID_LENGTH = 255  # database and container names, in characters (Cosmos's quota)
MAX_ITEM_ID_BYTES = 1023  # an item's id, in UTF-8 bytes (Cosmos's quota: 1,023 bytes)
MAX_ITEM_BYTES = 2 * 1024 * 1024
_FORBIDDEN_ID_CHARS = frozenset("/\\?#")


class RidAllocator:
    """Cosmos-shaped resource ids: a container rid extends its database rid, and so on."""

    def __init__(self, start: int = 1) -> None:
        self._next = start
        self._lock = threading.Lock()

    def next_value(self) -> int:
        with self._lock:
            value = self._next
            self._next += 1
            return value

    def peek(self) -> int:
        """The value `next_value` returns next (the journal keeps it across restarts)."""
        return self._next

    def database(self) -> str:
        return _encode(self.next_value().to_bytes(4, "little"))

    def child(self, parent_rid: str, width: int) -> str:
        return self.child_with(parent_rid, self.next_value(), width)

    @staticmethod
    def child_with(parent_rid: str, value: int, width: int) -> str:
        return _encode(_decode(parent_rid) + value.to_bytes(width, "big"))


def _encode(raw: bytes) -> str:
    # Cosmos rids use '-' where base64 has '/', so a rid fits in a URL path segment.
    return base64.b64encode(raw, altchars=b"+-").decode("ascii")


def _decode(rid: str) -> bytes:
    return base64.b64decode(rid, altchars=b"+-")


def new_etag() -> str:
    return f'"{uuid.uuid4()}"'


def validate_id(value: object, what: str = "id", *, item: bool = False) -> str:
    """`value` when Cosmos takes it as a name (a database or container, `what` says which) or,
    with `item`, as an item id; a 400 with Cosmos's text otherwise (the length refusal opens
    with the words the azure-cosmos SDK's own tests match: "Ensure to provide a unique
    non-empty string less than '255' characters." for names, '1024' for item ids)."""
    if not isinstance(value, str):
        raise bad_request(f"The input {what} is invalid: 'id' must be a string.")
    if not value:
        raise bad_request(f"The input {what} is invalid: 'id' must not be empty.")
    too_long = (
        len(value.encode("utf-8", "surrogatepass")) > MAX_ITEM_ID_BYTES
        if item
        else len(value) > MAX_ID_LENGTH
    )
    if too_long:
        limit = MAX_ITEM_ID_BYTES + 1 if item else MAX_ID_LENGTH
        raise bad_request(
            f"The input name '{value[:64]}...' is invalid. Ensure to provide a unique non-empty "
            f"string less than '{limit}' characters."
        )
    bad = sorted(set(value) & _FORBIDDEN_ID_CHARS)
    if bad:
        raise bad_request(
            f"The input {what} is invalid: 'id' contains the forbidden character(s) {bad}."
        )
    if value.endswith(" "):
        raise bad_request(f"The input {what} is invalid: 'id' ends with a space.")
    return value


def too_large(size: int, limit: int = MAX_ITEM_BYTES) -> CosmosError:
    return CosmosError(
        413,
        "RequestEntityTooLarge",
        f"Request size is too large: {size} bytes exceeds the {limit}-byte limit.",
    )
