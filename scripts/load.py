"""Thin wrapper: `python scripts/load.py ...` is `orders load ...` (orders with duplicates)."""

from __future__ import annotations

import sys

from orders.cli import app

if __name__ == "__main__":
    sys.exit(app(["load", *sys.argv[1:]]))
