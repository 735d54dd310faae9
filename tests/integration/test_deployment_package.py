"""The deployed Function app imports `src/orders` and the core with no editable install.

Builds the file set the deployment ships (what .funcignore lets through), installs only
requirements.txt into a fresh venv and imports `function_app` from that folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pathspec
import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def deployment_files() -> list[Path]:
    spec = pathspec.PathSpec.from_lines(
        "gitignore", (REPO / ".funcignore").read_text().splitlines()
    )
    selected: list[Path] = []
    for root, dirs, files in os.walk(REPO):
        relative_root = Path(root).relative_to(REPO)
        dirs[:] = [d for d in dirs if not spec.match_file(f"{relative_root / d}/")]
        selected.extend(
            relative_root / name for name in files if not spec.match_file(str(relative_root / name))
        )
    return sorted(selected)


def test_funcignore_ships_the_app_and_nothing_else() -> None:
    files = {str(path) for path in deployment_files()}

    assert {"function_app.py", "host.json", "requirements.txt"} <= files
    assert "src/orders/__init__.py" in files
    # Billing runs on the core, a package of its own that requirements.txt cannot name (a
    # folder has no hash): its source is shipped instead, every module of it.
    core = REPO / "packages" / "exactly-once" / "src" / "exactly_once"
    modules = {str(path.relative_to(REPO)) for path in core.glob("*.py")}
    assert "packages/exactly-once/src/exactly_once/__init__.py" in modules
    assert modules <= files
    assert "packages/exactly-once/src/exactly_once/py.typed" in files
    assert not any(f.startswith(("tests/", "infra/", "emulators/", "scripts/")) for f in files)
    assert not any(
        f.startswith(("src/servicebus_emulator/", "src/cosmos_emulator/", "src/payments_standin/"))
        for f in files
    )
    assert "local.settings.json" not in files


def test_function_app_imports_from_the_deployment_file_set(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for relative in deployment_files():
        target = site / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, target)
    env_dir = tmp_path / "venv"
    # A venv without a pip of its own, installed into with the hashes checked, as the remote
    # build's pip does with this file (pip turns hash checking on when it sees hashes; uv is told
    # to). uv, pinned in the dev lock, rather than pip: the same pins in a tenth of the CPU, for
    # a suite that runs on two cores. Nothing is byte-compiled ahead: the import below compiles
    # what it loads.
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [
            Path(sys.executable).with_name("uv"),
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            "--require-hashes",
            "-r",
            site / "requirements.txt",
        ],
        check=True,
        timeout=540,
    )

    expected_prefix = str(site / "src")
    core_prefix = str(site / "packages" / "exactly-once" / "src")
    probe = (
        "import function_app, orders, exactly_once, json;"
        f"assert orders.__file__.startswith({expected_prefix!r}), orders.__file__;"
        f"assert exactly_once.__file__.startswith({core_prefix!r}), exactly_once.__file__;"
        "print(json.dumps([f.get_function_name() for f in function_app.app.get_functions()]))"
    )
    result = subprocess.run(
        [str(python), "-c", probe],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONNOUSERSITE": "1"},
    )

    assert result.returncode == 0, result.stderr
    assert "process_order" in result.stdout
