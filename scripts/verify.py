"""Thin wrapper: `python scripts/verify.py ...` is `orders verify ...` (audits a load run)."""

from __future__ import annotations

import sys

from orders.cli import app

if __name__ == "__main__":
    sys.exit(app(["verify", *sys.argv[1:]]))
