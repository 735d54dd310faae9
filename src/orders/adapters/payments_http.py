"""`PaymentGateway` over HTTP: `POST /payments` and `POST /refunds` with `Idempotency-Key`,
`GET /payments` and `GET /refunds`.

The key goes downstream unchanged, so every retry of one charge or refund (after a timeout, a
5xx, a crash of the caller) asks the provider for the same one, and the provider makes at most
one.
Answers are read bounded (`MAX_ANSWER_BYTES`) and parsed by `payments_answers`.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from types import TracebackType
from typing import TypeVar
from urllib.parse import urlsplit

import aiohttp

from orders.adapters.payments_answers import (
    PERMANENT_REFUND_REASONS,
    charge_from,
    charges_page,
    decode,
    failure_for,
    refund_from,
    refunds_page,
)
from orders.domain.idempotency import validate_idempotency_key
from orders.domain.payments import Charge, ChargeRequest, Refund, RefundRequest
from orders.exceptions import (
    InvalidIdempotencyKeyError,
    PaymentRefusedError,
    PaymentUnavailableError,
)

SessionFactory = Callable[[], aiohttp.ClientSession]
T = TypeVar("T")

MAX_ANSWER_BYTES = 1024 * 1024  # a page of 1000 charges is about 200 KB, of refunds 300 KB
PAGE_SIZE = 1000
MAX_PAGES = 10_000  # a provider whose cursor never ends must not loop us forever


class HttpPaymentGateway:
    """One session for the gateway's life (made on first use); `close()` or `async with`."""

    def __init__(
        self,
        base_url: str,
        timeout_seconds: float,
        session_factory: SessionFactory = aiohttp.ClientSession,
        *,
        token: str | None = None,
    ) -> None:
        """`token`: sent as `Authorization: Bearer` on every request (the stand-in's money
        routes ask for it; None sends none)."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            raise ValueError(
                f"the payment service URL must be http(s)://host[:port][/path]: {base_url!r}"
            )
        if not timeout_seconds > 0:
            raise ValueError("the payment service timeout must be positive")
        self._base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session_factory = session_factory
        self._session: aiohttp.ClientSession | None = None
        self._auth = {} if token is None else {"Authorization": f"Bearer {token}"}

    async def __aenter__(self) -> HttpPaymentGateway:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def charge(self, request: ChargeRequest) -> Charge:
        check_key(request.idempotency_key)
        body = {
            "orderId": request.order_id,
            "amount": plain_amount(request.amount),
            "currency": request.currency,
        }
        status, payload = await self._call(
            "POST", "/payments", json=body, headers={"Idempotency-Key": request.idempotency_key}
        )
        if status not in (200, 201):
            raise failure_for(status, payload)
        charge = charge_from(decode(payload, "charge"))
        if not charge.answers(request):
            # The provider contradicts its own contract; asking again would not change that.
            raise PaymentRefusedError(
                "charge-mismatch",
                f"asked to charge {request.amount} {request.currency} for order "
                f"{request.order_id!r} under key {request.idempotency_key!r}; the answer was "
                f"{charge.amount} {charge.currency} for {charge.order_id!r} under "
                f"{charge.idempotency_key!r} (payment {charge.payment_id!r})",
                status=status,
            )
        return charge

    async def charges_for(self, order_id: str) -> list[Charge]:
        charges = await self._all_pages("/payments", {"orderId": order_id}, charges_page)
        if any(charge.order_id != order_id for charge in charges):
            raise PaymentUnavailableError(f"asked for the charges of {order_id!r}, got others")
        return charges

    async def list_all_charges(self) -> list[Charge]:
        """Every charge the provider holds (for the verifier), oldest first."""
        return await self._all_pages("/payments", {}, charges_page)

    async def refund(self, request: RefundRequest) -> Refund:
        check_key(request.idempotency_key)
        body = {
            "paymentId": request.payment_id,
            "amount": plain_amount(request.amount),
            "currency": request.currency,
        }
        status, payload = await self._call(
            "POST", "/refunds", json=body, headers={"Idempotency-Key": request.idempotency_key}
        )
        if status not in (200, 201):
            raise failure_for(status, payload, PERMANENT_REFUND_REASONS)
        refund = refund_from(decode(payload, "refund"))
        if not refund.answers(request):
            # The provider contradicts its contract, or the payment is another order's: asking
            # again would not change either.
            raise PaymentRefusedError(
                "refund-mismatch",
                f"asked to refund {request.amount} {request.currency} of payment "
                f"{request.payment_id!r} (order {request.order_id!r}) under key "
                f"{request.idempotency_key!r}; the answer was {refund.amount} {refund.currency} "
                f"of {refund.payment_id!r} (order {refund.order_id!r}) under "
                f"{refund.idempotency_key!r} (refund {refund.refund_id!r})",
                status=status,
            )
        return refund

    async def refunds_for(self, order_id: str) -> list[Refund]:
        refunds = await self._all_pages("/refunds", {"orderId": order_id}, refunds_page)
        if any(refund.order_id != order_id for refund in refunds):
            raise PaymentUnavailableError(f"asked for the refunds of {order_id!r}, got others")
        return refunds

    async def list_all_refunds(self) -> list[Refund]:
        """Every refund the provider holds (for the verifier), oldest first."""
        return await self._all_pages("/refunds", {}, refunds_page)

    async def _all_pages(
        self,
        path: str,
        query: dict[str, str],
        read_page: Callable[[object], tuple[list[T], str | None]],
    ) -> list[T]:
        found: list[T] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = {**query, "limit": str(PAGE_SIZE)}
            if cursor is not None:
                params["after"] = cursor
            status, payload = await self._call("GET", path, params=params)
            if status != 200:
                raise failure_for(status, payload)
            page, cursor = read_page(decode(payload, f"list {path}"))
            found.extend(page)
            if cursor is None:
                return found
        raise PaymentUnavailableError(f"the list {path} did not end within {MAX_PAGES} pages")

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes | None]:
        """(status, body or None when longer than MAX_ANSWER_BYTES); never a redirect."""
        if self._session is None:
            self._session = self._session_factory()
        try:
            async with self._session.request(
                method,
                self._base_url + path,
                json=json,
                params=params,
                headers={**self._auth, **(headers or {})},
                timeout=self._timeout,
                allow_redirects=False,
            ) as response:
                return response.status, await _read_bounded(response.content)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PaymentUnavailableError(
                f"the payment service did not answer {method} {path}: {exc!r}"
            ) from exc


async def _read_bounded(stream: aiohttp.StreamReader) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(64 * 1024):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def check_key(key: str) -> None:
    """Refuse here what a provider refuses (and what no HTTP header can carry): the HTTP API's
    own key rule, so derive keys from ids that may hold other text (e.g. hash them)."""
    try:
        validate_idempotency_key(key)
    except InvalidIdempotencyKeyError as exc:
        raise PaymentRefusedError("invalid-idempotency-key", str(exc)) from None


def plain_amount(amount: Decimal) -> str:
    """Plain notation (`1E+2` -> `"100"`), as providers expect decimal strings."""
    if not amount.is_finite():
        raise PaymentRefusedError("invalid-amount", f"the amount {amount} is not a number")
    return format(amount, "f")
