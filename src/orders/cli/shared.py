"""What every command shares: the consoles, logging, and settings that fail clearly."""

from __future__ import annotations

import logging
import sys

import typer
from rich.console import Console

from orders.settings import Settings, SettingsError

err = Console(stderr=True)
out = Console()


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    for noisy in ("azure", "uamqp", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def settings_or_exit(*, needs_servicebus: bool = True) -> Settings:
    try:
        settings = Settings.from_env()
        if needs_servicebus:
            settings.require_servicebus()
        return settings
    except SettingsError as exc:
        err.print(f"[red]configuration error:[/red] {exc}")
        raise typer.Exit(2) from exc
