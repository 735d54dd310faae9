"""The core's README sets it side by side with Powertools, NServiceBus and MassTransit, and each
of our rows names a test that shows it, never a promise: every test named there exists, and a
row without one says "no"."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "packages/exactly-once/src/exactly_once/README.md"
HEADING = "## Side by side with Powertools, NServiceBus and MassTransit"
NAMED_TEST = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")
# The rows issue 36 asks for, by the start of their first cell.
EXPECTED_ROWS = (
    "Key from the payload",
    "Payload validation",
    "Any async function",
    "Local cache",
    "HTTP `Idempotency-Key`",
    "In-progress expiry",
    "Fenced completion",
    "Broker settlement",
    "Retries with backoff",
    "Retention",
    "Change-feed outbox relay",
    "OpenTelemetry messaging conventions",
)


def feature_rows() -> list[list[str]]:
    """The table's rows (header and rule left out), each as its cells."""
    section = README.read_text(encoding="utf-8").split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def defines(path: Path, test_name: str) -> bool:
    return re.search(rf"^(async )?def {test_name}\(", path.read_text(), re.MULTILINE) is not None


def test_each_of_our_rows_names_a_test_that_exists_or_says_no() -> None:
    rows = feature_rows()
    assert all(len(row) == 5 for row in rows), [row[0] for row in rows if len(row) != 5]
    for feature, ours, *_ in rows:
        named = NAMED_TEST.findall(ours)
        if ours.startswith("no"):
            assert not named, f"{feature}: a row we do not have names no test"
            continue
        assert ours.startswith("yes") and named, f"{feature}: neither a test nor 'no': {ours}"
        for path, test_name in named:
            assert defines(REPO / path, test_name), f"{feature}: {path}::{test_name} is missing"


def test_the_table_has_the_rows_the_issue_asks_for() -> None:
    features = [row[0] for row in feature_rows()]
    for expected in EXPECTED_ROWS:
        assert any(feature.startswith(expected) for feature in features), expected


def test_a_test_named_that_does_not_exist_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a renamed test is not found under its old name."""
    module = tmp_path / "test_example.py"
    module.write_text("async def test_present() -> None:\n    pass\n")
    assert defines(module, "test_present")
    assert not defines(module, "test_renamed")
    assert not defines(module, "test_pres")
