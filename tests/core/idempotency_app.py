"""A FastAPI app with one POST endpoint behind the core's `Idempotency-Key` dependency.

No `from __future__ import annotations` here: FastAPI reads the route's annotations at run time,
and the dependency they name is local to `app_for`."""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse

from exactly_once.idempotency_key import IdempotencyKeys, KeyClaim


def app_for(
    keys: IdempotencyKeys, endpoint: Callable[[KeyClaim], Awaitable[JSONResponse]]
) -> FastAPI:
    """`POST /things`: `endpoint` run with the request's claim."""
    app = FastAPI()

    @app.post("/things")
    async def post_thing(claim: Annotated[KeyClaim, Depends(keys)]) -> JSONResponse:
        return await endpoint(claim)

    return app
