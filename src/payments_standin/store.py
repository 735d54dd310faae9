"""The ledger: one row per charge in SQLite, the idempotency key UNIQUE.

The key's uniqueness is the charge-once guarantee, not a read before the write: a charge is an
`INSERT ... ON CONFLICT DO NOTHING` inside one immediate transaction, and only when nothing was
inserted is the existing row read and compared. Two requests with one key, in threads of this
process or in two processes sharing one `--data` directory, therefore yield one row.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

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
"""


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
        created_at = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
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

    def close(self) -> None:
        with self._lock:
            self._db.close()


_COLUMNS = "seq, payment_id, idempotency_key, order_id, amount, currency, created_at"


def _payment(row: tuple[object, ...]) -> Payment:
    seq, payment_id, key, order_id, amount, currency, created_at = row
    assert isinstance(seq, int)
    return Payment(
        seq, str(payment_id), str(key), str(order_id), str(amount), str(currency), str(created_at)
    )
