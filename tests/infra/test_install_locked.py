"""scripts/install_locked.py takes uv from the lock itself: its pin and every hash, nothing else."""

from __future__ import annotations

import re
from itertools import takewhile
from pathlib import Path

import pytest

from .scripts_support import load_script

REPO = Path(__file__).resolve().parents[2]
INSTALL_LOCKED = load_script("install_locked")


def test_the_uv_pin_is_taken_with_all_its_hashes_and_nothing_after_them() -> None:
    lock = (REPO / "requirements-dev.txt").read_text()
    block = INSTALL_LOCKED.pinned_block(lock, INSTALL_LOCKED.UV_PIN)

    first, *hashes = block.splitlines()
    pinned = re.search(r"^uv==(\S+) \\$", first)
    assert pinned, first
    assert hashes and all(re.fullmatch(r" +--hash=sha256:[0-9a-f]{64}( \\)?", h) for h in hashes)
    assert not hashes[-1].endswith("\\"), "the block ends where the requirement ends"
    # Every hash the lock gives uv, so pip's hash-checking mode accepts any of its wheels.
    after = lock.split(first + "\n", 1)[1].splitlines()
    assert hashes == list(takewhile(lambda line: line.lstrip().startswith("--hash="), after))


def test_a_lock_without_the_pin_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="no `uv==` pin"):
        INSTALL_LOCKED.pinned_block("pip==24.0 \\\n    --hash=sha256:" + "0" * 64 + "\n", "uv==")
