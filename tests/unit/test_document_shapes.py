"""The store's own shapes stay in the Cosmos adapters: the domain holds plain data and rules,
and the service layer works on what the ports hand over.

Cosmos adds `_etag`, `_ts`, `_rid`, ... to every document and expires one by its `ttl`; the
adapters (and the fakes that stand in for them) read and write those, and hand the domain a
document's own fields with its version apart (`exactly_once.records.StoredDocument`,
`orders.domain.leases.StampedDocument`). A domain or service module that names one of them, or
strips them by their leading underscore, has taken the storage shape back in.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ORDERS = Path(__file__).resolve().parents[2] / "src" / "orders"

STORE_SHAPE = re.compile(
    r"""["'](?:_etag|_ts|_rid|_self|_attachments|_lsn|ttl)["']"""  # a system property by name
    r"""|startswith\(\s*["']_["']\s*\)"""  # or all of them, by their leading underscore
)


def store_shapes_in(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if STORE_SHAPE.search(line)
    ]


@pytest.mark.parametrize("layer", ["domain", "service"])
def test_the_layer_names_none_of_the_stores_own_properties(layer: str) -> None:
    assert (ORDERS / layer).is_dir()
    assert store_shapes_in(ORDERS / layer) == []


@pytest.mark.parametrize(
    "line",
    [
        'etag=str(document.get("_etag", "")),',  # what domain/saga.py once read
        "written = int(document['_ts'])",
        '{**document, "ttl": 86400}',
        'kept = {k: v for k, v in document.items() if not k.startswith("_")}',
    ],
)
def test_a_domain_module_that_reads_a_store_property_fails_the_check(
    tmp_path: Path, line: str
) -> None:
    (tmp_path / "leaky.py").write_text(f"def f(document):\n    {line}\n", encoding="utf-8")

    assert store_shapes_in(tmp_path) == [f"leaky.py:2: {line}"]


def test_names_that_merely_contain_the_words_pass(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text(
        "ttl_seconds = 60\nexpires_after_seconds = ttl_seconds\netag = stored.etag\n",
        encoding="utf-8",
    )

    assert store_shapes_in(tmp_path) == []
