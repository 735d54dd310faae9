"""A FastAPI app with one POST endpoint behind the core's `Idempotency-Key` dependency, and an
endpoint whose runs can be held, failed or counted.

No `from __future__ import annotations` here: FastAPI reads the route's annotations at run time,
and the dependency they name is local to `app_for`."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse

from exactly_once._idempotency_key import IdempotencyKeys, KeyClaim, answer_problems


def app_for(
    keys: IdempotencyKeys,
    endpoint: Callable[[KeyClaim], Awaitable[JSONResponse]],
    *,
    problems: bool = True,
) -> FastAPI:
    """`POST /things`: `endpoint` run with the request's claim; refusals answered as problems
    unless `problems` is False (an app that never called `answer_problems`)."""
    app = FastAPI()
    if problems:
        answer_problems(app)

    @app.post("/things")
    async def post_thing(claim: Annotated[KeyClaim, Depends(keys)]) -> JSONResponse:
        return await endpoint(claim)

    return app


class Endpoint:
    """A POST endpoint whose runs can be held, failed or counted."""

    def __init__(self) -> None:
        self.runs = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()
        self.fail_next = False
        self.took_over: list[bool] = []  # `claim.took_over` of each run

    async def __call__(self, claim: KeyClaim) -> JSONResponse:
        if claim.replay is not None:
            return claim.replay
        self.runs += 1
        self.took_over.append(claim.took_over)
        self.started.set()
        await self.release.wait()
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the endpoint failed")
        return await claim.complete(201, {"run": self.runs}, {"Location": f"/things/{self.runs}"})
