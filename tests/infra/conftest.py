from __future__ import annotations

from pathlib import Path

import pytest

from .bicep_model import REPO_ROOT, bicep_files, parse

# Upstream schemas copied into the repo (sources in tests/data/reference/SOURCES.md).
REFERENCE = REPO_ROOT / "tests" / "data" / "reference"


@pytest.fixture(scope="module")
def templates() -> dict[str, dict[str, object]]:
    """Every infra/**/*.bicep parsed once (parse() also caches across modules)."""
    return {relative: parse(relative) for relative in bicep_files()}


@pytest.fixture(scope="session")
def reference_schemas() -> Path:
    return REFERENCE
