"""A runtime built on first use, as the hosts that import before they may build need it.

The Functions host imports function_app.py (and the HTTP API's app) before any setting or network
is needed, so their runtimes are built by the first invocation or request, once, and closed by
the runtime's own `close()` (the one mechanism `service.runtimes.Runtime` gives every runtime).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from orders.exceptions import ServiceNotReadyError

logger = logging.getLogger("orders")


class Closes(Protocol):
    """What a host holds open and closes once: a runtime (`service.runtimes.Runtime`), or the
    process's clients the runtimes share."""

    async def close(self) -> None: ...


R = TypeVar("R", bound=Closes)


class Lazy(Generic[R]):
    """A runtime built on first use, never at import: the Functions host imports
    function_app.py before any setting or network is needed. A failed build raises
    `ServiceNotReadyError` and is tried again on the next use."""

    def __init__(self, build: Callable[[], Awaitable[R]], what: str) -> None:
        self._build = build
        self._what = what
        self._value: R | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> R:
        if self._value is None:
            async with self._lock:
                if self._value is None:
                    try:
                        self._value = await self._build()
                    except Exception as exc:
                        logger.error("cannot build the %s", self._what, exc_info=exc)
                        raise ServiceNotReadyError(f"{self._what} unavailable: {exc!r}") from exc
        return self._value

    @property
    def built(self) -> R | None:
        """The runtime once built (None before, or after a failed build)."""
        return self._value

    def use(self, value: R | None) -> None:
        """Put a runtime in place (tests); None makes the next use build again."""
        self._value = value

    async def close(self) -> None:
        value, self._value = self._value, None
        if value is not None:
            await value.close()
