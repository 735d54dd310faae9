"""The core as its users get it: the sdist and wheel of packages/exactly-once, built and checked
(`twine check --strict`), the wheel installed into a clean venv with nothing of this repository
on its path, and the guide run there (read from the installed package) against our emulators.

`make test` runs it (marked slow). The venv gets the wheel and what it declares, plus what the
guide itself imports (the Functions library and its Service Bus binding), at the versions of the
app's lock (as constraints, so the dependencies resolve from the wheel's own metadata); uv (pinned
in the dev lock: pip's resolver costs ten times the CPU on a suite run on two cores) finds them
in its cache or the package index, as `make setup` does, then checks the installed set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from core_support import QUEUE, unique
from servers import CosmosServer

from servicebus_emulator import RunningEmulator

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "packages" / "exactly-once"
DRIVER = Path(__file__).with_name("installed_guide.py")
# What the guide imports besides the core, pinned in the app's lock.
GUIDE_EXTRAS = ("azure-functions", "azurefunctions-extensions-bindings-servicebus")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def run(*command: str | Path, cwd: Path) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def constraints_from_the_lock(target: Path) -> Path:
    """requirements.txt without its hashes: a constraints file takes none."""
    pins = [
        line.rstrip(" \\")
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if re.match(r"^[A-Za-z0-9]", line)
    ]
    target.write_text("\n".join(pins) + "\n")
    return target


def test_the_built_wheel_runs_the_guide_in_a_clean_venv(
    tmp_path: Path, python_cosmos: CosmosServer, servicebus: RunningEmulator
) -> None:
    dist = tmp_path / "dist"
    # No build isolation: the backend is the locked setuptools of this venv (which satisfies
    # the core's build-system.requires), so the build needs no index. The sdist is built first
    # and the wheel from it, so a file the sdist leaves out fails the wheel's test below.
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, CORE, cwd=tmp_path)
    [sdist] = dist.glob("exactly_once_azure-0.*.tar.gz")
    [wheel] = dist.glob("exactly_once_azure-0.*-py3-none-any.whl")
    run(Path(sys.executable).with_name("twine"), "check", "--strict", sdist, wheel, cwd=tmp_path)

    shipped = set(zipfile.ZipFile(wheel).namelist())
    typed_with_its_guide = {"py.typed", "README.md", "CHANGELOG.md"}
    assert {f"exactly_once/{name}" for name in typed_with_its_guide} <= shipped
    assert {name.split("/")[0] for name in shipped} == {
        "exactly_once",
        wheel.name.removesuffix("-py3-none-any.whl") + ".dist-info",
    }, "the wheel carries the core and nothing else of this repository"
    with tarfile.open(sdist) as archive:
        assert any(name.endswith("/pyproject.toml") for name in archive.getnames())

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)  # installed into by this venv's uv, through --python
    python = env_dir / "bin" / "python"
    uv = Path(sys.executable).with_name("uv")
    run(
        uv,
        "pip",
        "install",
        "--quiet",
        "--python",
        python,
        "--constraint",
        constraints_from_the_lock(tmp_path / "constraints.txt"),
        f"{wheel}[fastapi,pydantic]",
        *GUIDE_EXTRAS,
        cwd=tmp_path,
    )
    run(uv, "pip", "check", "--python", python, cwd=tmp_path)

    greeting_id, user = unique("greeting"), unique("user")
    result = subprocess.run(
        [str(python), "-I", str(DRIVER), servicebus.connection_string, QUEUE, user, greeting_id],
        cwd=tmp_path,
        env={
            "PATH": os.environ.get("PATH", ""),
            "COSMOS_ENDPOINT": python_cosmos.endpoint,
            "COSMOS_KEY": python_cosmos.key,
            "ServiceBusConnection": servicebus.connection_string,
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])

    # The core imported from the clean venv, not from the source tree.
    assert Path(seen["module"]).is_relative_to(env_dir), seen["module"]
    assert Path(seen["prefix"]) == env_dir
    assert not Path(seen["module"]).is_relative_to(REPO)
    assert seen["version"] == wheel.name.split("-")[1]
    # The guide's outcomes: the greeting and its duplicate completed (one card, one record),
    # the conflicting resend and the poison message dead-lettered with the guide's reasons.
    assert seen["left"] == []
    assert seen["dead_letters"] == {greeting_id: "RequestHashMismatch", "poison": "InvalidMessage"}
    assert len(seen["documents"]) == 2
    assert f"card-{greeting_id}" in seen["documents"]
