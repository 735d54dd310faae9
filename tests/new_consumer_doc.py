"""docs/new-consumer.md's worked example as a module: the consumer a user adds, exactly as the
doc writes it (its `# new file:` block), for tests that run it in this process."""

from __future__ import annotations

import re
import types
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from exactly_once import Retention, Store
from orders.domain.events import OrderAccepted
from orders.domain.model import OrderPlaced

DOC = Path(__file__).resolve().parents[1] / "docs" / "new-consumer.md"
MODULE = "src/orders/service/notifications.py"
_BLOCK = re.compile(r"^```python\n# new file: (?P<path>\S+)\n(?P<code>.*?)^```$", re.M | re.S)


def documented_notifications(store: Store, retention: Retention) -> Any:
    """What the doc's `notifications(store, retention)` returns over `store`: the consumer as
    its registry entry builds it."""
    (code,) = [m["code"] for m in _BLOCK.finditer(DOC.read_text("utf-8")) if m["path"] == MODULE]
    module = types.ModuleType("notifications_from_the_doc")
    exec(compile(code, MODULE, "exec"), module.__dict__)
    return module.notifications(store, retention)


def accepted_event(order_id: str) -> OrderAccepted:
    """An order's OrderAccepted event, which the worked example notifies once."""
    order = OrderPlaced.model_validate(
        {
            "orderId": order_id,
            "customerId": "c-1",
            "currency": "EUR",
            "lines": [{"sku": "s", "quantity": 1, "unitPrice": Decimal("12.5")}],
        }
    )
    return OrderAccepted.of(order, total_amount="12.5", accepted_at=datetime.now(UTC))
