"""The layering is enforced, not hoped for: `lint-imports` (run by `make lint`) passes on the
code as it is and fails the moment a lower layer imports a higher one or the domain an SDK."""

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
    source_root = tmp_path / "src"
    shutil.copytree(REPO / "src", source_root, ignore=shutil.ignore_patterns("*.egg-info"))
    return source_root


def test_the_code_keeps_every_contract(tmp_path: Path) -> None:
    result = lint_imports(copy_of_src(tmp_path))

    assert result.returncode == 0, result.stdout
    assert "4 kept, 0 broken" in result.stdout


VIOLATIONS = {
    # module: (an import it must not have, the contract that must then break)
    "orders/domain/model.py": ("import orders.adapters.cosmos_store", "cli > entrypoints"),
    "orders/service/consumer.py": ("import azure.cosmos", "Only orders.adapters imports"),
    "orders/entrypoints/worker.py": ("import orders.adapters.servicebus", "composition root"),
    "cosmos_emulator/ids.py": ("import orders.settings", "never import each other"),
    "payments_standin/store.py": ("import orders.domain.payments", "never import each other"),
}


def test_each_kind_of_violation_breaks_its_contract(tmp_path: Path) -> None:
    source_root = copy_of_src(tmp_path)
    for module, (violation, _) in VIOLATIONS.items():
        target = source_root / module
        target.write_text(target.read_text() + f"\n{violation}  # injected by the test\n")

    result = lint_imports(source_root)

    assert result.returncode != 0
    assert "0 kept, 4 broken" in result.stdout
    report = result.stdout.split("Broken contracts")[-1]
    for module, (violation, contract) in VIOLATIONS.items():
        assert contract in report, (module, violation)
