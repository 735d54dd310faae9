from __future__ import annotations

from pathlib import Path

import pytest

from .bicep_model import REPO_ROOT, bicep_files, parse

# ../shared exists on dev machines and in CI, never for users of the project.
SHARED_REFERENCE = REPO_ROOT / ".." / "shared" / "reference"


@pytest.fixture(scope="module")
def templates() -> dict[str, dict[str, object]]:
    """Every infra/**/*.bicep parsed once (parse() also caches across modules)."""
    return {relative: parse(relative) for relative in bicep_files()}


@pytest.fixture(scope="session")
def shared_reference() -> Path:
    if not SHARED_REFERENCE.is_dir():
        pytest.skip(f"{SHARED_REFERENCE} is absent (it exists only on dev machines and in CI)")
    return SHARED_REFERENCE
