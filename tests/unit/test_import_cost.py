"""What importing costs every `orders` process: the `exactly_once` core's public names are
imported on first use, so the domain and the command line load no Azure SDK, and no process
with keys loads azure.identity (MSAL, cryptography). Each check runs in a fresh interpreter:
this one has imported everything already."""

from __future__ import annotations

import subprocess
import sys

import pytest

import exactly_once


def modules_loaded_by(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with one of `prefixes` that `statement` leaves imported."""
    probe = (
        f"{statement}\nimport sys\n"
        f"print('\\n'.join(m for m in sys.modules if m.startswith({prefixes!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.split()


@pytest.mark.parametrize(
    "statement",
    [
        "import exactly_once",
        "from exactly_once import Decision, Outcome, Refused",
        "from exactly_once.store import Record, RecordStatus, create_or_find",
        "from exactly_once.decisions import settle",
        "from exactly_once.options import ConsumerOptions",
        "from exactly_once.retries import Backoff, Retrier, delivery_owner",
        "from exactly_once.keys import key_record_id",
        "import orders.domain.idempotency, orders.domain.dead_letters, orders.domain.messages",
        "import orders.cli",
    ],
)
def test_the_core_the_domain_and_the_command_line_load_no_azure_sdk(statement: str) -> None:
    assert modules_loaded_by(statement, ("azure", "aiohttp")) == []


def test_a_public_name_of_the_cloud_parts_loads_its_sdk_on_first_use() -> None:
    loaded = modules_loaded_by("from exactly_once import CosmosStore", ("azure.cosmos",))
    assert "azure.cosmos" in loaded


def test_every_public_name_is_the_object_its_module_defines() -> None:
    import importlib

    for name in exactly_once.__all__:
        module = importlib.import_module(f"exactly_once.{exactly_once._MODULE_OF[name]}")
        assert getattr(exactly_once, name) is getattr(module, name), name
    assert sorted(exactly_once._MODULE_OF) == sorted(exactly_once.__all__)
    assert set(exactly_once.__all__) <= set(dir(exactly_once))
    with pytest.raises(AttributeError):
        exactly_once.NotAName  # noqa: B018  (the attribute access is what is tested)


def test_a_worker_with_keys_never_imports_azure_identity() -> None:
    statement = "import orders.cli, orders.bootstrap, orders.entrypoints.worker"
    assert modules_loaded_by(statement, ("azure.identity", "msal")) == []
