"""The layering is enforced, not hoped for: `lint-imports` (run by `make lint`) passes on the
code as it is and fails the moment a lower layer imports a higher one, the domain an SDK, two
modules import each other (even only for the type checker; the Service Bus emulator's too), or
the `exactly_once` core imports the app (or anything of ours but the app imports the core)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="lint-imports is missing: `make setup` installs it"
)


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(REPO / "pyproject.toml")],
        cwd=source_root.parent,
        env={**os.environ, "PYTHONPATH": str(source_root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_of_src(tmp_path: Path) -> Path:
    """The app's, the emulators' and the core's packages (a distribution of its own, in
    packages/exactly-once) in one folder, first on the path: their copies are what is checked."""
    source_root = tmp_path / "src"
    shutil.copytree(REPO / "src", source_root, ignore=shutil.ignore_patterns("*.egg-info"))
    core = REPO / "packages" / "exactly-once" / "src" / "exactly_once"
    shutil.copytree(core, source_root / "exactly_once")
    return source_root


def test_the_code_keeps_every_contract(tmp_path: Path) -> None:
    result = lint_imports(copy_of_src(tmp_path))

    assert result.returncode == 0, result.stdout
    assert "8 kept, 0 broken" in result.stdout


TYPE_CHECKING_IMPORT = "import typing\nif typing.TYPE_CHECKING:\n    import {}"

VIOLATIONS = {
    # module: (an import it must not have, the contract that must then break)
    "orders/domain/model.py": ("import orders.adapters.cosmos_layout", "cli > entrypoints"),
    "orders/service/consumer.py": ("import azure.cosmos", "Only orders.adapters imports"),
    "orders/entrypoints/worker.py": ("import orders.adapters.servicebus", "a route named here"),
    "cosmos_emulator/ids.py": ("import orders.settings", "never import each other"),
    "payments_standin/store.py": ("import orders.domain.payments", "never import each other"),
    "orders/service/verify_status.py": (
        TYPE_CHECKING_IMPORT.format("orders.service.verify"),
        "No import cycles",
    ),
    "exactly_once/_orchestrator.py": ("import orders.domain.model", "core never imports the app"),
    "servicebus_emulator/config.py": ("import exactly_once._records", "only the app imports"),
    "servicebus_emulator/ports.py": (
        TYPE_CHECKING_IMPORT.format("servicebus_emulator.queue"),
        "the Service Bus emulator's modules",
    ),
}


def test_each_kind_of_violation_breaks_its_contract(tmp_path: Path) -> None:
    source_root = copy_of_src(tmp_path)
    for module, (violation, _) in VIOLATIONS.items():
        target = source_root / module
        target.write_text(target.read_text() + f"\n{violation}  # injected by the test\n")

    result = lint_imports(source_root)

    assert result.returncode != 0
    assert "0 kept, 8 broken" in result.stdout
    report = result.stdout.split("Broken contracts")[-1]
    for module, (violation, contract) in VIOLATIONS.items():
        assert contract in report, (module, violation)


# The two cycles only the type checker used to see, each put back on its own.
TYPE_CHECKING_CYCLES = {
    "orders/exceptions.py": "orders.domain.documents",
    "orders/service/verify_status.py": "orders.service.verify",
}


@pytest.mark.parametrize("module", sorted(TYPE_CHECKING_CYCLES))
def test_a_cycle_through_a_type_checking_import_breaks_the_acyclic_contract(
    tmp_path: Path, module: str
) -> None:
    source_root = copy_of_src(tmp_path)
    target = source_root / module
    cycle = TYPE_CHECKING_IMPORT.format(TYPE_CHECKING_CYCLES[module])
    target.write_text(target.read_text() + f"\n{cycle}  # injected by the test\n")

    result = lint_imports(source_root)

    assert result.returncode != 0
    assert "No import cycles" in result.stdout.split("Broken contracts")[-1]


CORE_STANDS_ALONE = "core never imports the app"
CORE_FOR_THE_APP_ONLY = "only the app imports"


@pytest.mark.parametrize(
    ("module", "violation", "contract"),
    [
        ("exactly_once/cosmos.py", "import orders.settings", CORE_STANDS_ALONE),
        (
            "exactly_once/_records.py",
            TYPE_CHECKING_IMPORT.format("orders.domain.model"),
            CORE_STANDS_ALONE,
        ),
        ("exactly_once/servicebus.py", "import servicebus_emulator", CORE_STANDS_ALONE),
        ("exactly_once/decisions.py", "import cosmos_emulator", CORE_STANDS_ALONE),
        ("exactly_once/telemetry.py", "import payments_standin", CORE_STANDS_ALONE),
        ("cosmos_emulator/ids.py", "import exactly_once", CORE_FOR_THE_APP_ONLY),
        ("payments_standin/store.py", "import exactly_once.cosmos", CORE_FOR_THE_APP_ONLY),
    ],
)
def test_the_core_and_the_app_are_kept_apart_one_way(
    tmp_path: Path, module: str, violation: str, contract: str
) -> None:
    source_root = copy_of_src(tmp_path)
    target = source_root / module
    target.write_text(target.read_text() + f"\n{violation}  # injected by the test\n")

    result = lint_imports(source_root)

    # (The app imports the core, so a core that imports an emulator also makes the app import
    # it, indirectly: the independence contract breaks as well, as it should.)
    assert result.returncode != 0
    assert contract in result.stdout.split("Broken contracts")[-1]


ROUTES = "Entrypoints reach an adapter only by a route named here"


def test_a_named_route_is_open_to_its_entrypoint_only(tmp_path: Path) -> None:
    """The Functions entrypoint may import the Service Bus adapter (a named route); the HTTP
    entrypoint importing the same adapter is refused, as is the CLI."""
    source_root = copy_of_src(tmp_path)
    for module in ("orders/entrypoints/http_api.py", "orders/cli/operations.py"):
        target = source_root / module
        target.write_text(
            target.read_text() + "\nimport orders.adapters.servicebus  # injected by the test\n"
        )

    result = lint_imports(source_root)

    assert result.returncode != 0
    report = " ".join(result.stdout.split("Broken contracts")[-1].split())
    assert ROUTES in report
    assert "orders.entrypoints.http_api -> orders.adapters.servicebus" in report
    assert "orders.cli.operations -> orders.adapters.servicebus" in report
    assert "orders.entrypoints.functions" not in report


def test_a_named_route_that_no_longer_exists_is_an_error(tmp_path: Path) -> None:
    source_root = copy_of_src(tmp_path)
    target = source_root / "orders/entrypoints/functions.py"
    route = "from orders.adapters.monitoring import configure_monitoring\n"
    assert route in target.read_text()
    target.write_text(target.read_text().replace(route, ""))

    result = lint_imports(source_root)

    said = " ".join(result.stdout.split())  # the report wraps long lines
    assert result.returncode != 0
    assert (
        "No matches for ignored import orders.entrypoints.functions -> orders.adapters.monitoring"
        in said
    )


def test_the_app_may_import_the_core(tmp_path: Path) -> None:
    source_root = copy_of_src(tmp_path)
    target = source_root / "orders/service/consumer.py"
    target.write_text(target.read_text() + "\nimport exactly_once  # injected by the test\n")

    result = lint_imports(source_root)

    assert result.returncode == 0, result.stdout
    assert "8 kept, 0 broken" in result.stdout
