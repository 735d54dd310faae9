"""The one exception type the emulator raises to answer a request with a Cosmos error."""

from __future__ import annotations


class CosmosError(Exception):
    """An error answered to the client as `{"code": ..., "message": ...}` with its HTTP status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        substatus: int | None = None,
        extra: dict[str, object] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.substatus = substatus
        self.extra = extra or {}
        self.headers = headers or {}


def bad_request(message: str) -> CosmosError:
    return CosmosError(400, "BadRequest", message)


# Cosmos's own texts open each message (callers and the SDKs' tests match on them); what
# follows in brackets names the resource, as Cosmos appends its diagnostics.
NOT_FOUND_TEXT = "Resource Not Found. Learn more: https://aka.ms/cosmosdb-tsg-not-found"
ITEM_NOT_FOUND_TEXT = (
    "Entity with the specified id does not exist in the system. More info: "
    "https://aka.ms/cosmosdb-tsg-not-found"
)
CONFLICT_TEXT = "Resource with specified id or name already exists."
ITEM_CONFLICT_TEXT = "Entity with the specified id already exists in the system."


def not_found(detail: str = "", text: str = NOT_FOUND_TEXT) -> CosmosError:
    return CosmosError(404, "NotFound", f"{text} ({detail})" if detail else text)


def conflict(detail: str = "", text: str = CONFLICT_TEXT) -> CosmosError:
    return CosmosError(409, "Conflict", f"{text} ({detail})" if detail else text)


def item_not_found(item_id: str) -> CosmosError:
    return not_found(f"id {item_id[:300]!r}", ITEM_NOT_FOUND_TEXT)


def item_conflict(item_id: str) -> CosmosError:
    return conflict(f"id {item_id[:300]!r}", ITEM_CONFLICT_TEXT)


def precondition_failed(
    message: str = "Operation cannot be performed because one of the specified precondition "
    "criteria was not met.",
) -> CosmosError:
    return CosmosError(412, "PreconditionFailed", message)


def unsupported(feature: str) -> CosmosError:
    """Named so a user sees exactly which part of the request the emulator refuses."""
    return CosmosError(
        400, "BadRequest", f"cosmos-emulator does not support {feature} (see its README)"
    )


def not_durable(message: str) -> CosmosError:
    """A write the journal could not keep (a full disk): nothing was changed, retry later.

    503 is what Cosmos answers when it did not process a request; the SDK raises it as a
    `CosmosHttpResponseError` (after one retry of its own) and callers treat 5xx as transient.
    Cosmos's 403 for a full collection is a permanent refusal: wrong for a disk that frees."""
    return CosmosError(503, "ServiceUnavailable", message)
