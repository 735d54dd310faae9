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


def not_found(message: str = "Resource Not Found") -> CosmosError:
    return CosmosError(404, "NotFound", message)


def conflict(message: str = "Resource with specified id or name already exists.") -> CosmosError:
    return CosmosError(409, "Conflict", message)


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
