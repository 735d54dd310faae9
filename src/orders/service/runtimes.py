"""What each host runs, built by the composition root (`orders.bootstrap`) or by a test over
fakes: the service-layer objects, and everything they hold open.

Every runtime closes by one mechanism: the build registers each resource's cleanup on an
`AsyncExitStack` the moment the resource exists and hands the stack over with `pop_all()`;
`Runtime.close()` unwinds it, last registered first.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from orders.service.console import OperationsConsole
from orders.service.dispatcher import OutboxDispatcher
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.order_lookup import OrderLookup
from orders.service.ports import RegisteredConsumer
from orders.service.subscribers import Source


@dataclass(kw_only=True)
class Runtime:
    """What a host runs, and everything it holds open: the build's `AsyncExitStack`, handed
    over with `pop_all()`, so `close()` runs every cleanup the build registered, last first."""

    resources: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def close(self) -> None:
        await self.resources.aclose()


@dataclass
class HttpRuntime(Runtime):
    """What the HTTP API needs; tests build one over fakes."""

    intake: IdempotentOrderIntake
    lookup: OrderLookup
    default_scope: str
    # Trust X-MS-CLIENT-PRINCIPAL-ID only where the platform sets it (App Service auth on).
    trust_principal_header: bool = False


@dataclass
class ConsoleRuntime(Runtime):
    """What the operations console works with; tests build one over fakes."""

    console: OperationsConsole
    # As in HttpRuntime: the principal header names who acted only where the platform sets it.
    trust_principal_header: bool = False


@dataclass
class SubscriberRuntime(Runtime):
    """One registered consumer and where it competes."""

    source: Source
    handler: RegisteredConsumer  # its core, or a door of its own


@dataclass
class DispatcherRuntime(Runtime):
    dispatcher: OutboxDispatcher
