"""ORDERS_ALLOWED_HOSTS: read like every other setting, checked when a local server starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orders.cli import app
from orders.settings import Settings


def test_the_setting_is_a_comma_separated_list_with_blanks_skipped() -> None:
    settings = Settings.from_env(
        {"COSMOS_ENDPOINT": "http://127.0.0.1:1", "ORDERS_ALLOWED_HOSTS": " api , web:8080 ,,"}
    )
    assert settings.allowed_hosts == ("api", "web:8080")
    assert Settings.from_env({"COSMOS_ENDPOINT": "http://127.0.0.1:1"}).allowed_hosts == ()


@pytest.mark.parametrize(
    ("environment", "options"),
    [({"ORDERS_ALLOWED_HOSTS": "api,a/b"}, []), ({}, ["--allow-host", "web:99999"])],
)
def test_serve_refuses_a_bad_host_at_start_before_it_listens(
    environment: dict[str, str], options: list[str]
) -> None:
    result = CliRunner().invoke(
        app,
        ["serve", "--port", "0", *options],
        env={
            "COSMOS_ENDPOINT": "http://127.0.0.1:1",
            "ServiceBusConnection": "Endpoint=sb://127.0.0.1:1;UseDevelopmentEmulator=true;",
            **environment,
        },
    )
    assert result.exit_code == 2
    assert "not a host" in result.output
