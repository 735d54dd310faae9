"""The lock (hash-pinned requirement files, scripts/lock.py) matches what pyproject.toml declares.

A bound changed in pyproject.toml (or requirements-checkov.in) without `make lock` fails here, and
so does a lock that leaves a declared dependency out, pins it outside its bound or carries no hash.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]


def _load_lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_script", REPO / "scripts" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


LOCK = _load_lock_script()
LOCKS: tuple[Any, ...] = LOCK.LOCKS
declared_inputs: Callable[..., list[str]] = LOCK.declared_inputs
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
    for text in declared_inputs(lock):
        requirement = Requirement(text)
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


def test_a_changed_bound_without_a_re_lock_is_caught(tmp_path: Path) -> None:
    """The check above can fail: loosening one bound changes the digest the lock records."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(REPO / "requirements.txt", tmp_path / "requirements.txt")
    runtime = next(lock for lock in LOCKS if lock.output == "requirements.txt")
    assert recorded_digest(runtime, tmp_path) == inputs_digest(declared_inputs(runtime, tmp_path))
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"pydantic>=2.7"', '"pydantic>=2.6"'))
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
