"""The Functions deployment's requirements match the package's runtime dependencies."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def requirements_file() -> set[str]:
    lines = (REPO / "requirements.txt").read_text().splitlines()
    return {str(Requirement(line)) for line in lines if line.strip() and not line.startswith("#")}


def test_requirements_txt_equals_pyproject_runtime_dependencies() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = {str(Requirement(dep)) for dep in pyproject["project"]["dependencies"]}

    assert requirements_file() == declared


def test_servicebus_binding_extension_is_pinned() -> None:
    # Only pre-releases exist and the next one changes `deadletter`'s signature.
    assert "azurefunctions-extensions-bindings-servicebus==1.0.0b2" in requirements_file()
