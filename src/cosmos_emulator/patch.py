"""Partial document update (`PATCH`): set / add / replace / remove / incr / move."""

from __future__ import annotations

import copy
import math
from typing import Any

from .errors import bad_request
from .query.values import is_number

MAX_PATCH_OPERATIONS = 10
_SYSTEM = ("/id", "/_rid", "/_self", "/_etag", "/_ts", "/_attachments")


def apply_patch(doc: dict[str, Any], operations: object, pk_paths: list[str]) -> dict[str, Any]:
    """A patched deep copy of `doc`; the original is untouched when any operation fails."""
    if not isinstance(operations, list) or not operations:
        raise bad_request("Patch request needs a non-empty 'operations' list.")
    if len(operations) > MAX_PATCH_OPERATIONS:
        raise bad_request(
            f"Patch request has {len(operations)} operations; at most "
            f"{MAX_PATCH_OPERATIONS} are allowed."
        )
    result = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict):
            raise bad_request("Each patch operation must be an object.")
        _apply_one(result, op, pk_paths)
    return result


def _segments(path: object) -> list[str]:
    if not isinstance(path, str) or not path.startswith("/") or path == "/":
        raise bad_request(f"Invalid patch path {path!r}.")
    return [s.replace("~1", "/").replace("~0", "~") for s in path[1:].split("/")]


def _check_target(path: str, pk_paths: list[str]) -> None:
    if path in _SYSTEM or path in pk_paths:
        raise bad_request(
            f"Patch cannot modify {path}: the id, the partition key and "
            "system properties are immutable."
        )


def _parent(doc: dict[str, Any], segments: list[str], path: str) -> Any:
    node: Any = doc
    for seg in segments[:-1]:
        if isinstance(node, dict) and seg in node:
            node = node[seg]
        elif isinstance(node, list) and _is_index(seg) and int(seg) < len(node):
            node = node[int(seg)]
        else:
            raise bad_request(f"Patch path {path} does not exist in the document.")
    if not isinstance(node, dict | list):
        raise bad_request(f"Patch path {path} does not point into an object or array.")
    return node


def _is_index(segment: str) -> bool:
    # str.isdigit() also accepts digits like '²' that int() refuses.
    return segment.isascii() and segment.isdigit() and len(segment) <= 9


def _index(parent: list[Any], key: str, path: str, *, allow_end: bool) -> int:
    if key == "-" and allow_end:
        return len(parent)
    if not _is_index(key):
        raise bad_request(f"Patch path {path} needs an array index.")
    index = int(key)
    if index > len(parent) or (index == len(parent) and not allow_end):
        raise bad_request(f"Patch path {path}: index {index} is out of range.")
    return index


def _apply_one(doc: dict[str, Any], op: dict[str, Any], pk_paths: list[str]) -> None:
    kind = str(op.get("op", "")).lower()
    path = op.get("path")
    segments = _segments(path)
    assert isinstance(path, str)
    _check_target(path, pk_paths)
    if kind == "move":
        source = op.get("from")
        src_segments = _segments(source)
        assert isinstance(source, str)
        _check_target(source, pk_paths)
        value = _remove(doc, src_segments, source)
        _set(doc, segments, path, value)
        return
    if kind != "remove" and "value" not in op:
        raise bad_request(f"Patch operation '{kind}' on {path} needs a 'value'.")
    value = op.get("value")
    if kind == "set":
        _set(doc, segments, path, value)
    elif kind == "add":
        parent = _parent(doc, segments, path)
        if isinstance(parent, list):
            parent.insert(_index(parent, segments[-1], path, allow_end=True), value)
        else:
            parent[segments[-1]] = value
    elif kind == "replace":
        parent = _parent(doc, segments, path)
        key = segments[-1]
        if isinstance(parent, list):
            parent[_index(parent, key, path, allow_end=False)] = value
        elif key in parent:
            parent[key] = value
        else:
            raise bad_request(f"Patch 'replace': {path} does not exist in the document.")
    elif kind == "remove":
        _remove(doc, segments, path)
    elif kind == "incr":
        if not is_number(value):
            raise bad_request(f"Patch 'incr' on {path} needs a numeric value.")
        parent = _parent(doc, segments, path)
        key = segments[-1]
        if isinstance(parent, list):
            index = _index(parent, key, path, allow_end=False)
            current = parent[index]
        else:
            current = parent.get(key, 0)
        if not is_number(current):
            raise bad_request(f"Patch 'incr': {path} is not a number.")
        total = _double_sum(current, value, path)
        if isinstance(parent, list):
            parent[index] = total
        else:
            parent[key] = total
    else:
        raise bad_request(f"Unknown patch operation {kind!r}.")


def _double_sum(current: Any, value: Any, path: str) -> int | float:
    """`current + value`, refused when it leaves the range of a double (Cosmos numbers)."""
    total: int | float = current + value
    try:
        finite = math.isfinite(total)  # an int too large for a double raises OverflowError
    except OverflowError:
        finite = False
    if not finite:
        raise bad_request(f"Patch 'incr' on {path} would overflow a double.")
    return total


def _set(doc: dict[str, Any], segments: list[str], path: str, value: Any) -> None:
    parent = _parent(doc, segments, path)
    key = segments[-1]
    if isinstance(parent, list):
        index = _index(parent, key, path, allow_end=True)
        if index == len(parent):
            parent.append(value)
        else:
            parent[index] = value
    else:
        parent[key] = value


def _remove(doc: dict[str, Any], segments: list[str], path: str) -> Any:
    parent = _parent(doc, segments, path)
    key = segments[-1]
    if isinstance(parent, list):
        return parent.pop(_index(parent, key, path, allow_end=False))
    if key not in parent:
        raise bad_request(f"Patch 'remove': {path} does not exist in the document.")
    return parent.pop(key)
