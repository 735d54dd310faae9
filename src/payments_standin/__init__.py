"""A local stand-in for a third-party payment provider that honours `Idempotency-Key`.

A separate package, like the emulators: it never imports `orders`, and `orders` only runs it
as a process (`python -m payments_standin`, `orders payments`). See README.md.
"""

from .server import ServerLimits
from .standin import PaymentStandin

__all__ = ["PaymentStandin", "ServerLimits"]
