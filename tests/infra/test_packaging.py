"""The lock (hash-pinned requirement files, scripts/lock.py) matches what pyproject.toml declares.

A bound changed in pyproject.toml (or requirements-checkov.in) without `make lock` fails here, and
so does a lock that leaves a declared dependency out, pins it outside its bound or carries no hash.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .scripts_support import load_script

REPO = Path(__file__).resolve().parents[2]
# The idempotency core, a distribution of its own that the app depends on.
CORE = REPO / "packages" / "exactly-once"


LOCK = load_script("lock")
LOCKS: tuple[Any, ...] = LOCK.LOCKS
declared_inputs: Callable[..., list[str]] = LOCK.declared_inputs
local_packages: Callable[..., dict[str, Path]] = LOCK.local_packages
inputs_digest: Callable[[list[str]], str] = LOCK.inputs_digest
recorded_digest: Callable[..., str | None] = LOCK.recorded_digest

# `name==version [; marker] \` then its `--hash=sha256:...` lines.
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def pins(output: str) -> dict[str, list[tuple[Version, int]]]:
    """Name -> [(pinned version, number of hashes)] (a name may be pinned once per marker)."""
    found: dict[str, list[tuple[Version, int]]] = {}
    current: list[tuple[Version, int]] | None = None
    for line in (REPO / output).read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current = found.setdefault(canonicalize_name(match.group(1)), [])
            current.append((Version(match.group(2)), 0))
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = current[-1]
            current[-1] = (version, hashes + 1)
    return found


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.output)
def test_lock_was_generated_from_the_declared_dependencies(lock: Any) -> None:
    assert recorded_digest(lock) == inputs_digest(declared_inputs(lock)), (
        f"{lock.output} was not generated from the dependencies {lock.source} declares now: "
        "run `make lock` and commit the result"
    )


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.output)
def test_every_declared_dependency_is_pinned_inside_its_bound(lock: Any) -> None:
    locked = pins(lock.output)
    ours = set(local_packages(lock))
    for text in declared_inputs(lock):
        requirement = Requirement(text)
        if requirement.name in ours:
            continue  # installed from its folder by `make setup`, not from the lock
        versions = locked.get(canonicalize_name(requirement.name))
        assert versions, f"{requirement.name} is declared but not in {lock.output}"
        # One pin per marker fork; at least one must satisfy the bound (the others apply to
        # Pythons or platforms the bound's own marker may exclude).
        assert any(requirement.specifier.contains(v, prereleases=True) for v, _ in versions), (
            f"{lock.output} pins {requirement.name} at {versions}, outside {requirement.specifier}"
        )


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.output)
def test_every_pin_is_exact_and_hashed(lock: Any) -> None:
    locked = pins(lock.output)
    assert len(locked) > 10
    unhashed = {name for name, versions in locked.items() if any(h == 0 for _, h in versions)}
    assert not unhashed
    # pip's hash-checking mode refuses a requirement without `==`: no other form may appear.
    for line in (REPO / lock.output).read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            assert _PIN.match(line), f"not an exact pin in {lock.output}: {line!r}"


def copy_of_the_runtime_lock_inputs(tmp_path: Path) -> tuple[Any, Path]:
    """The runtime lock, the app's pyproject.toml and the core's, copied into `tmp_path`: the
    lock and the core's pyproject.toml (to edit) there."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(REPO / "requirements.txt", tmp_path / "requirements.txt")
    core = tmp_path / "packages" / "exactly-once" / "pyproject.toml"
    core.parent.mkdir(parents=True)
    shutil.copy(CORE / "pyproject.toml", core)
    return next(lock for lock in LOCKS if lock.output == "requirements.txt"), core


def test_a_changed_bound_without_a_re_lock_is_caught(tmp_path: Path) -> None:
    """The check above can fail: loosening one bound changes the digest the lock records."""
    runtime, _ = copy_of_the_runtime_lock_inputs(tmp_path)
    assert recorded_digest(runtime, tmp_path) == inputs_digest(declared_inputs(runtime, tmp_path))
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"pydantic>=2.7"', '"pydantic>=2.6"'))
    assert recorded_digest(runtime, tmp_path) != inputs_digest(declared_inputs(runtime, tmp_path))


def test_a_changed_bound_of_the_core_without_a_re_lock_is_caught(tmp_path: Path) -> None:
    """The core's own dependencies are inputs of the app's lock too."""
    runtime, core = copy_of_the_runtime_lock_inputs(tmp_path)
    assert recorded_digest(runtime, tmp_path) == inputs_digest(declared_inputs(runtime, tmp_path))
    core.write_text(core.read_text().replace('"aiohttp>=3.9,<4"', '"aiohttp>=3.8,<4"'))
    assert recorded_digest(runtime, tmp_path) != inputs_digest(declared_inputs(runtime, tmp_path))


def test_the_functions_deployment_installs_the_runtime_dependencies_only() -> None:
    runtime = set(pins("requirements.txt"))
    dev_only = {"pytest", "ruff", "mypy", "uv", "checkov"}
    assert not runtime & dev_only
    assert set(pins("requirements.txt")) <= set(pins("requirements-dev.txt"))
    # The same version of every runtime package in the deployment and in the tests.
    dev = pins("requirements-dev.txt")
    for name, versions in pins("requirements.txt").items():
        assert {v for v, _ in versions} == {v for v, _ in dev[name]}, name


def test_servicebus_binding_extension_is_pinned() -> None:
    # Only pre-releases exist (a preview; infra/README.md) and the next one changes
    # `deadletter`'s signature: the bound itself is exact, not just the lock.
    assert "azurefunctions-extensions-bindings-servicebus==1.0.0b2" in declared_inputs(LOCKS[0])
    binding = pins("requirements.txt")["azurefunctions-extensions-bindings-servicebus"]
    assert {version for version, _ in binding} == {Version("1.0.0b2")}


def core_project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((CORE / "pyproject.toml").read_text())["project"]
    return project


def test_the_core_is_a_distribution_of_its_own() -> None:
    """Its own name, a 0.x version, ranges rather than pins, a typed package with its README
    as the long description; the app names it among its dependencies like any user would."""
    project = core_project()
    assert project["name"] == "exactly-once-azure"
    assert Version(project["version"]).major == 0
    assert "Typing :: Typed" in project["classifiers"]
    assert (CORE / project["readme"]).is_file()
    assert (CORE / "src" / "exactly_once" / "py.typed").is_file()
    assert (CORE / "src" / "exactly_once" / "CHANGELOG.md").is_file()
    for text in project["dependencies"]:
        specifier = Requirement(text).specifier
        assert any(s.operator == ">=" for s in specifier), f"no lower bound: {text}"
        assert any(s.operator == "<" for s in specifier), f"no upper bound: {text}"
    # FastAPI and pydantic are extras: one module each imports them.
    assert set(project["optional-dependencies"]) == {"fastapi", "pydantic"}
    assert not any(
        Requirement(text).name in {"fastapi", "pydantic"} for text in project["dependencies"]
    )

    app = tomllib.loads((REPO / "pyproject.toml").read_text())
    core = next(
        Requirement(text)
        for text in app["project"]["dependencies"]
        if Requirement(text).name == "exactly-once-azure"
    )
    assert core.extras == {"fastapi", "pydantic"}
    assert core.specifier.contains(project["version"])
    assert app["tool"]["uv"]["sources"]["exactly-once-azure"]["path"] == "packages/exactly-once"
    # A module left in (or merged back into) the old folder would be a second copy of the core.
    assert not list((REPO / "src" / "exactly_once").glob("*.py")), "the core is packages/'s"


@pytest.mark.parametrize("lock", LOCKS[:2], ids=lambda lock: lock.output)
def test_the_lock_pins_what_the_core_needs_but_not_the_core(lock: Any) -> None:
    """pip's hash-checking mode refuses a folder, so the core itself is not in the lock; every
    one of its dependencies, extras included, is, inside the core's range."""
    assert local_packages(lock) == {"exactly-once-azure": CORE}
    locked = pins(lock.output)
    assert "exactly-once-azure" not in locked
    project = core_project()
    needed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        needed += extra
    for text in needed:
        requirement = Requirement(text)
        versions = locked.get(canonicalize_name(requirement.name))
        assert versions, f"the core needs {requirement.name}, missing from {lock.output}"
        assert any(requirement.specifier.contains(v) for v, _ in versions), (text, versions)
