"""The store's own shapes stay in the Cosmos adapters: the domain holds plain data and rules,
and the service layer works on what the ports hand over.

Cosmos adds `_etag`, `_ts`, `_rid`, ... to every document and expires one by its `ttl`; the
adapters (and the fakes that stand in for them) read and write those, and hand the domain a
document's own fields with its version apart (`exactly_once._records.StoredDocument`). A domain
or service module that names one of them, or strips them by their leading underscore, has taken
the storage shape back in.

The documents themselves (their ids, field names, the `id` that is each one's storage key) are
laid out by the Cosmos adapter (`adapters/cosmos_layout.py`), which the service layer reaches
through its `DocumentLayout` port: a domain record that maps itself to or from a document, or a
domain module that builds a document with its `id`, has taken the layout back in. So has a
domain function that takes a document at all: the layout reads documents into the domain's
values (`SagaOrder`, `StoredStatus`, `FiledRejection`, ...), and the domain decides on those.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ORDERS = Path(__file__).resolve().parents[2] / "src" / "orders"

STORE_SHAPE = re.compile(
    r"""["'](?:_etag|_ts|_rid|_self|_attachments|_lsn|ttl)["']"""  # a system property by name
    r"""|startswith\(\s*["']_["']\s*\)"""  # or all of them, by their leading underscore
)


DOCUMENT_LAYOUT = re.compile(
    r"""\bdef (?:to|from)_document\b"""  # a record that maps itself to or from a document
    r"""|["']id["']\s*:"""  # a document literal with its storage key
)


def lines_matching(pattern: re.Pattern[str], root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if pattern.search(line)
    ]


def store_shapes_in(root: Path) -> list[str]:
    return lines_matching(STORE_SHAPE, root)


def document_layouts_in(root: Path) -> list[str]:
    return lines_matching(DOCUMENT_LAYOUT, root)


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


def test_the_domain_lays_out_no_document() -> None:
    assert (ORDERS / "domain").is_dir()
    assert document_layouts_in(ORDERS / "domain") == []


@pytest.mark.parametrize(
    "line",
    [
        "def to_document(self) -> dict[str, Any]:",  # what BillingRecord once had
        "def from_document(cls, document: dict[str, Any]) -> OrderRecord:",
        'return {"id": self.record_id, "orderId": self.order_id}',
        "document = {'id': status_document_id(order_id)}",
        '"id" : order.order_id,',
    ],
)
def test_a_domain_module_that_lays_out_a_document_fails_the_check(
    tmp_path: Path, line: str
) -> None:
    (tmp_path / "layout.py").write_text(f"class R:\n    {line}\n", encoding="utf-8")

    assert document_layouts_in(tmp_path) == [f"layout.py:2: {line}"]


def test_ids_and_documents_by_other_names_pass(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text(
        "def to_documents_count(self): ...\n"
        "event_id = document['id']\n"
        'view = {"orderId": order_id, "identity": 1}\n'
        "def order_event_id(order_id: str) -> str: ...\n",
        encoding="utf-8",
    )

    assert document_layouts_in(tmp_path) == []


# A document's `type` is the layout's too: the domain has no use for the names (the console, which
# shows documents raw, keeps its own copy, held equal to the layout's).
DOCUMENT_TYPE_NAME = re.compile(r"\b[A-Z_]*DOCUMENT_TYPE\b")


def document_type_names_in(root: Path) -> list[str]:
    return lines_matching(DOCUMENT_TYPE_NAME, root)


def test_the_domain_names_no_document_type() -> None:
    assert (ORDERS / "domain").is_dir()
    assert document_type_names_in(ORDERS / "domain") == []


@pytest.mark.parametrize(
    "line",
    [
        'SHIPMENT_DOCUMENT_TYPE = "shipment"',  # what domain/inbox.py once held
        'if document.get("type") == STATUS_DOCUMENT_TYPE:',
        "from orders.adapters.cosmos_layout import ORDER_DOCUMENT_TYPE",
        "kinds = (LINE_DOCUMENT_TYPE, OUTBOX_DOCUMENT_TYPE)",
    ],
)
def test_a_domain_module_that_names_a_document_type_fails_the_check(
    tmp_path: Path, line: str
) -> None:
    (tmp_path / "kinds.py").write_text(f"def f(document):\n    {line}\n", encoding="utf-8")

    assert document_type_names_in(tmp_path) == [f"kinds.py:2: {line}"]


def test_types_by_other_names_pass(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text(
        "DOCUMENT_TYPES_SHOWN = 3\ndocument_type = kind_of(event)\nMY_DOCUMENT_TYPE_COUNT = 1\n",
        encoding="utf-8",
    )

    assert document_type_names_in(tmp_path) == []


def document_parameters_in(root: Path) -> list[str]:
    """Every function (or method, or lambda) with a parameter named after a document: found by
    the parse tree, so a signature over many lines is found too."""
    found = []
    for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                arguments = node.args
                every = [
                    *arguments.posonlyargs,
                    *arguments.args,
                    *arguments.kwonlyargs,
                    *filter(None, (arguments.vararg, arguments.kwarg)),
                ]
                name = node.name if not isinstance(node, ast.Lambda) else "<lambda>"
                found += [
                    f"{path.relative_to(root.parent if root.is_file() else root)}:"
                    f"{node.lineno}: {name}({argument.arg})"
                    for argument in every
                    if "document" in argument.arg.lower()
                ]
    return found


@pytest.mark.parametrize(
    "where",
    [
        "domain",
        # GET's answer is built from the layout's `OrderPartition`, not from documents
        "service/order_lookup.py",
    ],
)
def test_neither_the_domain_nor_gets_lookup_takes_a_document(where: str) -> None:
    assert (ORDERS / where).exists()
    assert document_parameters_in(ORDERS / where) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        # what domain/saga.py, status.py and rejections.py had before the layout read them
        (
            "def check_event(document: dict[str, Any] | None, event: OrderEvent) -> None: ...",
            "check_event(document)",
        ),
        (
            "class StoredStatus:\n"
            "    @classmethod\n"
            "    def of(\n"
            "        cls,\n"
            "        document: Mapping[str, Any] | None,\n"
            "    ) -> StoredStatus: ...",
            "of(document)",
        ),
        ("async def read(*, stored_document: dict) -> None: ...", "read(stored_document)"),
        ("views = map(lambda documents: len(documents), pages)", "<lambda>(documents)"),
    ],
)
def test_a_domain_function_that_takes_a_document_fails_the_check(
    tmp_path: Path, source: str, found: str
) -> None:
    (tmp_path / "reads.py").write_text(source + "\n", encoding="utf-8")

    assert [line.split(": ", 1)[1] for line in document_parameters_in(tmp_path)] == [found]


def test_documents_that_are_not_parameters_pass(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text(
        "def validate_document(model: type, decoded: object) -> None: ...\n"
        "def order_of(order: object, docs: list[object]) -> None:\n"
        "    document = order\n",
        encoding="utf-8",
    )

    assert document_parameters_in(tmp_path) == []
