"""`@idempotent`: any async function made idempotent on the record store the consumers use.

The model is AWS Powertools' `idempotent_function`: a key taken from the call's arguments, a
completed call's return value stored and replayed to every later call with the same key. The
claim is the consumers' (`Claims`): creating the record is the lock, its lease is judged by the
database's clock, a call while another with the same key is in flight waits for it (at most
`max_wait_seconds`) and then raises `InProgressElsewhereError`, a claim whose lease ended (its
caller crashed) is taken over, a call with the same key and another payload raises
`PayloadMismatchError`, and an exception raised by the function releases the claim so that the
next call runs again.

Once the function has returned, its effect may have happened, and nothing releases the claim:
recording the return value is retried in place when the store fails transiently, and if it
still fails the call raises `CompletionFailedError` (a `TransientStoreError`) with the record
kept in progress and a background write still trying (`exactly_once._claims.CompletionRetries`).
A later call with the key waits for it (or is refused in progress) and then gets the replay.

    @idempotent(store=store, scope="webhooks", key=lambda event: event.id)
    async def credit(event: PaymentEvent) -> Receipt:
        ...

The return value is stored as JSON and rebuilt as the function's return type (its annotation,
or `output=`): JSON itself, a pydantic model, a dataclass, or any type pydantic can validate.
"""

from __future__ import annotations

import functools
import inspect
import logging
import typing
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

try:
    from pydantic import TypeAdapter, ValidationError
    from pydantic.errors import PydanticSchemaGenerationError
    from pydantic_core import PydanticSerializationError, to_jsonable_python
except ModuleNotFoundError as missing:  # an extra, not a dependency: say which to install
    raise ModuleNotFoundError(
        "@idempotent needs pydantic: pip install 'exactly-once-azure[pydantic]'",
        name=missing.name,
    ) from missing

from exactly_once._claims import DEFAULT_MAX_WAIT_SECONDS, Claims, CompletionRetries
from exactly_once._ports import RecordStore
from exactly_once._records import (
    DEFAULT_EXPIRES_AFTER_SECONDS,
    DEFAULT_LEASE_SECONDS,
    JsonInput,
    JsonValue,
    Record,
    RecordStatus,
    fingerprint,
)
from exactly_once.exceptions import CorruptRecordError
from exactly_once.keys import key_record_id

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("exactly_once")

# The stored result holds the value under this name, so a stored `null` is told from no result.
_VALUE = "value"


def idempotent(
    *,
    store: RecordStore,
    scope: str,
    key: Callable[..., str],
    payload: Callable[..., object] | None = None,
    output: object = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
    expires_after_seconds: int | None = DEFAULT_EXPIRES_AFTER_SECONDS,
    owner: str = "function",
    completion: CompletionRetries | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Make an async function idempotent per key.

    - `key`: called with the call's own arguments; returns the key (a non-empty string). Keys
      are scoped by `scope` (a prefix that outlives a rename of the function, as Powertools'
      `key_prefix`): the same key in two scopes is two records.
    - `payload`: called with the call's arguments; what the request hash compares (a call with
      the same key and another payload raises `PayloadMismatchError`). By default every
      argument, by name. Return JSON or anything pydantic serialises (a model, a dataclass).
    - `output`: the type the stored return value is rebuilt as; by default the function's
      return annotation.
    - `lease_seconds`: how long a claim outlives its caller's start: longer than the function's
      longest run, or an overlapping call takes the claim over and runs it again.
    - `max_wait_seconds`: how long a call waits for another call in flight with the same key
      before raising `InProgressElsewhereError` (0: refuse at once).
    - `expires_after_seconds`: the `ttl` of each record (None keeps them). A function called
      from a consumer passes the consumer's `Retention(...).ttl_seconds`.
    - `completion`: how storing the return value is retried when the store fails (in place,
      then in the background); a call whose value could not be stored raises
      `CompletionFailedError`, its record kept in progress.

    Raises `TypeError` or `ValueError` at decoration for a function or settings it cannot keep
    its promise with (a function that is not async, a return type it cannot store)."""
    if not scope:
        raise ValueError("scope must be a non-empty string")
    if lease_seconds <= 0 or max_wait_seconds < 0:
        raise ValueError("lease_seconds must be positive and max_wait_seconds not negative")
    if expires_after_seconds is not None and expires_after_seconds < lease_seconds:
        # Cosmos DB would delete a claim while its caller still works under it.
        raise ValueError(
            f"expires_after_seconds={expires_after_seconds} is shorter than the lease "
            f"({lease_seconds:g} s): a record would expire while its call runs"
        )

    # A coroutine function in return (not any awaitable): `asyncio.create_task` takes its calls.
    def decorate(func: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"@idempotent takes an async function; {func!r} is not one")
        # The type is only known at run time (an annotation, `output=`): R is the caller's.
        results = typing.cast("TypeAdapter[R]", _results_adapter(func, output))
        signature = inspect.signature(func)

        def request_hash(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
            if payload is not None:
                chosen = payload(*args, **kwargs)
            else:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                chosen = dict(bound.arguments)
            return fingerprint(_as_json(chosen, func))

        @functools.wraps(func)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            record_key = key_record_id(scope, _key_of(key, args, kwargs, func))
            wanted = Record(
                key=record_key,
                partition=record_key,
                request_hash=request_hash(args, kwargs),
                status=RecordStatus.IN_PROGRESS,
                # One owner per call: two calls in one process are two claimants.
                owner=f"{owner}-{uuid.uuid4().hex[:12]}",
                lease_seconds=lease_seconds,
                expires_after_seconds=expires_after_seconds,
            )
            claims = Claims(
                store,
                owner=wanted.owner,
                lease_seconds=lease_seconds,
                max_wait_seconds=max_wait_seconds,
                completion=completion,
            )
            owned = await claims.own(wanted)
            if owned.status is RecordStatus.COMPLETED:
                return _replayed(results, owned)
            try:
                value = await func(*args, **kwargs)
                # Stored exactly as it will be rebuilt: a value its type cannot hold fails
                # now, while the claim can still be released, not on every replay.
                dumped: JsonValue = results.dump_python(value, mode="json", warnings="error")
                results.validate_python(dumped)
                stored: JsonInput = {_VALUE: dumped}
            except BaseException:
                # Cancelled or failed before it returned: free the key so the next call runs
                # again. The only place a claim is released.
                await claims.release(owned)
                raise
            # The function has run: its effect may have happened, so the claim is kept from
            # here on, whatever the store does (`CompletionFailedError` leaves it in progress).
            if not await claims.finish_or_keep(owned, stored):
                logger.warning(
                    "%s: the claim of %s was taken over while it ran; its new owner records "
                    "the result",
                    func.__qualname__,
                    record_key,
                )
            return value

        return call

    return decorate


def _results_adapter(func: Callable[..., object], output: object) -> TypeAdapter[Any]:
    """What stores and rebuilds the return value: of `output`, else of the function's return
    annotation; a `TypeError` when neither names a type pydantic can store and rebuild."""
    if output is None:
        try:
            hints = typing.get_type_hints(func)
        except NameError as exc:
            raise TypeError(
                f"the return annotation of {func.__qualname__} does not resolve ({exc}); "
                "pass output= the return type"
            ) from exc
        if "return" not in hints:
            raise TypeError(
                f"{func.__qualname__} has no return annotation: annotate it or pass output="
            )
        output = hints["return"]
    try:
        return TypeAdapter(typing.cast("Any", output))
    except PydanticSchemaGenerationError as exc:
        raise TypeError(
            f"{func.__qualname__} returns {output!r}, which cannot be stored as JSON: return "
            "JSON, a pydantic model or a dataclass"
        ) from exc


def _key_of(
    key: Callable[..., str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    func: Callable[..., object],
) -> str:
    found = key(*args, **kwargs)
    if not isinstance(found, str) or not found:
        raise ValueError(
            f"the key function of {func.__qualname__} returned {found!r:.80}; "
            "it must return a non-empty string"
        )
    return found


def _as_json(value: object, func: Callable[..., object]) -> JsonValue:
    """The payload as JSON (pydantic serialises models, dataclasses, dates, ...)."""
    try:
        converted: JsonValue = to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise TypeError(
            f"the payload of a call of {func.__qualname__} is not JSON ({exc}); pass payload= "
            "a projection of the arguments to JSON"
        ) from exc
    return converted


def _replayed(results: TypeAdapter[R], record: Record) -> R:
    """The completed call's value, rebuilt; `CorruptRecordError` when the record holds none
    (a stored record is read back as untrusted input)."""
    stored = record.result
    if not isinstance(stored, dict) or _VALUE not in stored:
        raise CorruptRecordError(f"record {record.key!r} is completed without a stored value")
    try:
        return results.validate_python(stored[_VALUE])
    except ValidationError as exc:
        raise CorruptRecordError(
            f"record {record.key!r} holds a value its type does not take: {exc!r:.200}"
        ) from exc
