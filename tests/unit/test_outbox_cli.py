"""`orders outbox redrive` names one parked document or takes `--all`, never both, never half:
refused before any service is reached."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orders.cli import app


@pytest.mark.parametrize(
    "args",
    [[], ["o-1"], ["o-1", "o-1:outbox:OrderAccepted", "--all"], ["o-1", "--all"]],
    ids=["nothing", "half", "both", "half-and-all"],
)
def test_redrive_takes_one_document_or_all(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["outbox", "redrive", *args])
    assert result.exit_code == 2
    assert "name one document (ORDER_ID ID), or pass --all" in result.output
