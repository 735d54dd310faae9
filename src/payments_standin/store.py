"""The ledger: one row per charge and one per refund in SQLite, each idempotency key UNIQUE.

The key's uniqueness is the once-per-key guarantee, not a read before the write: a charge or a
refund is an `INSERT ... ON CONFLICT DO NOTHING` inside one immediate transaction, and then the
row for that key is read and compared. Two requests with one key, in threads of this process or
in two processes sharing one `--data` directory, therefore yield one row. A refund's check of
what remains refundable runs inside the same `BEGIN IMMEDIATE` transaction, which holds the
database's write lock: two refunds of one payment under different keys are serialised, and
together never exceed it.
"""

from __future__ import annotations

import builtins
import sqlite3
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Context, Decimal
from pathlib import Path
from typing import Literal

DATABASE_FILE = "payments.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    payment_id TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL UNIQUE,
    order_id TEXT NOT NULL,
    amount TEXT NOT NULL,
    currency TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS payments_by_order ON payments (order_id, seq);
CREATE TABLE IF NOT EXISTS refunds (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    refund_id TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL UNIQUE,
    payment_id TEXT NOT NULL,
    order_id TEXT NOT NULL,
    amount TEXT NOT NULL,
    currency TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_by_order ON refunds (order_id, seq);
CREATE INDEX IF NOT EXISTS refunds_by_payment ON refunds (payment_id, seq);
"""
# Sums of stored amounts (at most 24 significant digits each) stay exact.
EXACT = Context(prec=60)


@dataclass(frozen=True)
class ChargeRequest:
    """A validated request: amount is already in its canonical plain spelling."""

    idempotency_key: str
    order_id: str
    amount: str
    currency: str


@dataclass(frozen=True)
class Payment:
    seq: int
    payment_id: str
    idempotency_key: str
    order_id: str
    amount: str
    currency: str
    created_at: str

    def same_request(self, request: ChargeRequest) -> bool:
        return (self.order_id, self.amount, self.currency) == (
            request.order_id,
            request.amount,
            request.currency,
        )

    def to_json(self) -> dict[str, str]:
        return {
            "paymentId": self.payment_id,
            "orderId": self.order_id,
            "amount": self.amount,
            "currency": self.currency,
            "idempotencyKey": self.idempotency_key,
            "createdAt": self.created_at,
        }


@dataclass(frozen=True)
class ChargeResult:
    payment: Payment
    created: bool  # False: the key was already used (a replay or a reuse; compare the request)


@dataclass(frozen=True)
class RefundRequest:
    """A validated request: amount is already in its canonical plain spelling, and above 0."""

    idempotency_key: str
    payment_id: str
    amount: str
    currency: str


@dataclass(frozen=True)
class Refund:
    seq: int
    refund_id: str
    idempotency_key: str
    payment_id: str
    order_id: str  # the refunded payment's
    amount: str
    currency: str
    created_at: str

    def same_request(self, request: RefundRequest) -> bool:
        return (self.payment_id, self.amount, self.currency) == (
            request.payment_id,
            request.amount,
            request.currency,
        )

    def to_json(self) -> dict[str, str]:
        return {
            "refundId": self.refund_id,
            "paymentId": self.payment_id,
            "orderId": self.order_id,
            "amount": self.amount,
            "currency": self.currency,
            "idempotencyKey": self.idempotency_key,
            "createdAt": self.created_at,
        }


@dataclass(frozen=True)
class RefundResult:
    refund: Refund
    created: bool  # False: the key was already used (a replay or a reuse; compare the request)


RefusalReason = Literal[
    "unknown-payment", "currency-mismatch", "already-refunded", "refund-exceeds-payment"
]


class RefundRefused(Exception):
    """No refund was made and the key stays unused: the payment cannot take this refund."""

    def __init__(self, reason: RefusalReason, detail: str) -> None:
        super().__init__(detail)
        self.reason: RefusalReason = reason
        self.detail = detail


class Ledger:
    """Thread-safe: one connection, one transaction at a time (SQLite serialises writers
    anyway); the UNIQUE constraint, not the lock, is what keeps a key to one charge."""

    def __init__(self, data_dir: Path | None) -> None:
        if data_dir is None:
            target = ":memory:"
        else:
            data_dir.mkdir(parents=True, exist_ok=True)
            target = str(data_dir / DATABASE_FILE)
        # Autocommit mode: transactions are opened explicitly with BEGIN IMMEDIATE.
        self._db = sqlite3.connect(
            target, check_same_thread=False, isolation_level=None, timeout=30.0
        )
        self._lock = threading.Lock()
        with self._lock:
            if data_dir is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
            # An answered charge survives a crash of the process and of the machine.
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)

    def charge(self, request: ChargeRequest) -> ChargeResult:
        payment_id = f"pay_{uuid.uuid4().hex}"
        created_at = _now()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                inserted = self._db.execute(
                    "INSERT INTO payments"
                    " (payment_id, idempotency_key, order_id, amount, currency, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (idempotency_key) DO NOTHING",
                    (
                        payment_id,
                        request.idempotency_key,
                        request.order_id,
                        request.amount,
                        request.currency,
                        created_at,
                    ),
                ).rowcount
                row = self._db.execute(
                    f"SELECT {_COLUMNS} FROM payments WHERE idempotency_key = ?",
                    (request.idempotency_key,),
                ).fetchone()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return ChargeResult(_payment(row), created=inserted == 1)

    def list(self, order_id: str | None, after: int, limit: int) -> list[Payment]:
        """Charges in the order they were made, `seq` > after, at most `limit`."""
        where, params = (
            ("seq > ?", [after])
            if order_id is None
            else ("seq > ? AND order_id = ?", [after, order_id])
        )
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM payments WHERE {where} ORDER BY seq LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [_payment(row) for row in rows]

    def payment(self, payment_id: str) -> Payment | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM payments WHERE payment_id = ?", (payment_id,)
            ).fetchone()
        return None if row is None else _payment(row)

    def refund(self, request: RefundRequest) -> RefundResult:
        """The refund for this key: made now (`created`), or the one made before, whatever the
        payment's state now (the caller compares it with the request). Raises `RefundRefused`
        when the key is unused and the payment cannot take the refund."""
        refund_id = f"re_{uuid.uuid4().hex}"
        created_at = _now()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                refusal, order_id = self._refusal(request)
                inserted = 0
                if refusal is None:
                    inserted = self._db.execute(
                        "INSERT INTO refunds (refund_id, idempotency_key, payment_id, order_id,"
                        " amount, currency, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                        " ON CONFLICT (idempotency_key) DO NOTHING",
                        (
                            refund_id,
                            request.idempotency_key,
                            request.payment_id,
                            order_id,
                            request.amount,
                            request.currency,
                            created_at,
                        ),
                    ).rowcount
                row = self._db.execute(
                    f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE idempotency_key = ?",
                    (request.idempotency_key,),
                ).fetchone()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        if row is not None:  # a used key answers with its refund, even when now refusable
            return RefundResult(_refund(row), created=inserted == 1)
        assert refusal is not None
        raise refusal

    def _refusal(self, request: RefundRequest) -> tuple[RefundRefused | None, str]:
        """(why the payment cannot take this refund or None, the payment's orderId); inside
        the caller's transaction, so nothing refunds the payment between check and insert."""
        found = self._db.execute(
            "SELECT order_id, amount, currency FROM payments WHERE payment_id = ?",
            (request.payment_id,),
        ).fetchone()
        if found is None:
            return RefundRefused("unknown-payment", "no payment has this paymentId"), ""
        order_id, paid, currency = (str(value) for value in found)
        if request.currency != currency:
            return RefundRefused(
                "currency-mismatch", f"the payment was made in {currency}"
            ), order_id
        remaining = Decimal(paid)
        for (amount,) in self._db.execute(
            "SELECT amount FROM refunds WHERE payment_id = ?", (request.payment_id,)
        ):
            remaining = EXACT.subtract(remaining, Decimal(str(amount)))
        if remaining <= 0:
            return RefundRefused(
                "already-refunded", f"the payment of {paid} {currency} is fully refunded"
            ), order_id
        if Decimal(request.amount) > remaining:
            return RefundRefused(
                "refund-exceeds-payment",
                f"{format(remaining, 'f')} {currency} of the payment of {paid} {currency} "
                "remains refundable",
            ), order_id
        return None, order_id

    def list_refunds(
        self, order_id: str | None, payment_id: str | None, after: int, limit: int
    ) -> builtins.list[Refund]:
        """Refunds in the order they were made, `seq` > after, at most `limit`, optionally only
        those of one order or of one payment."""
        where, params = "seq > ?", list[object]([after])
        if order_id is not None:
            where, params = where + " AND order_id = ?", [*params, order_id]
        if payment_id is not None:
            where, params = where + " AND payment_id = ?", [*params, payment_id]
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE {where} ORDER BY seq LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [_refund(row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


_COLUMNS = "seq, payment_id, idempotency_key, order_id, amount, currency, created_at"
_REFUND_COLUMNS = (
    "seq, refund_id, idempotency_key, payment_id, order_id, amount, currency, created_at"
)


def _payment(row: tuple[object, ...]) -> Payment:
    seq, payment_id, key, order_id, amount, currency, created_at = row
    assert isinstance(seq, int)
    return Payment(
        seq, str(payment_id), str(key), str(order_id), str(amount), str(currency), str(created_at)
    )


def _refund(row: tuple[object, ...]) -> Refund:
    seq, refund_id, key, payment_id, order_id, amount, currency, created_at = row
    assert isinstance(seq, int)
    return Refund(
        seq,
        str(refund_id),
        str(key),
        str(payment_id),
        str(order_id),
        str(amount),
        str(currency),
        str(created_at),
    )
