"""Read the Bicep templates through pycep-parser and answer questions about them.

Bicep cannot be compiled here, so these helpers evaluate just enough of the language for the
tests: literals, references to parameters and variables (followed to their defaults), the
values main.bicep passes to a module, unary minus, `==`, `&&` and `cond ? a : b` once their
operands are known, `concat` of known arrays, and `[for x in array: ...]` loops over a known
array (a loop resource becomes one resource per element, named `symbol[i]`, and a loop over
`cond ? array : []` takes `cond` as its condition). Anything else stays as pycep's JSON.

pycep drops the quotes of string literals, so a bare string is a reference when it names a
parameter or variable of the file, and a literal otherwise.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pycep import BicepParser

REPO_ROOT = Path(__file__).resolve().parents[2]
INFRA = REPO_ROOT / "infra"
MAIN = "main.bicep"

Json = Any

# Setting (and azd output) name -> the entity name `azd up` deploys with default parameters: the
# code's defaults (src/orders/settings.py), so the app finds what was deployed.
DEPLOYED_ENTITY_NAMES = {
    "ORDERS_QUEUE": "orders",
    "COSMOS_DATABASE": "orders",
    "COSMOS_CONTAINER": "orders",
    "COSMOS_IDEMPOTENCY_CONTAINER": "idempotency",
    "COSMOS_INBOX_CONTAINER": "inbox",
    "COSMOS_LEASES_CONTAINER": "leases",
    "ORDER_EVENTS_TOPIC": "order-events",
    # The default status mode: versions decide on the plain queue.
    "STATUS_QUEUE": "order-status",
    "STATUS_SESSIONS": "false",
}
# Setting -> subscription, one per element of main.bicep's consumerSubscriptions (the app's
# registry of consumers); azd gets them as one array output, ORDER_EVENTS_SUBSCRIPTIONS.
DEPLOYED_SUBSCRIPTIONS = {"BILLING_SUBSCRIPTION": "billing", "SHIPPING_SUBSCRIPTION": "shipping"}


@functools.cache
def _parser() -> BicepParser:
    return BicepParser()


# Parsed document (by id) -> the file it came from, so `resources(doc)` can resolve loops.
_FILE_OF: dict[int, str] = {}


@functools.cache
def parse(relative: str) -> dict[str, Json]:
    """Parse infra/<relative> once per process (xdist workers each keep their own cache)."""
    result: dict[str, Json] = dict(_parser().parse(file_path=INFRA / relative))
    _FILE_OF[id(result)] = relative
    return result


def bicep_files() -> list[str]:
    return sorted(p.relative_to(INFRA).as_posix() for p in INFRA.rglob("*.bicep"))


def declared_resource_names(relative: str) -> list[str]:
    """Symbolic names of every `resource` declaration in the source text, nested ones included.

    pycep keeps only the last nested child resource of a parent, so the tests compare this
    against what it parsed to make sure no resource vanished unseen.
    """
    text = (INFRA / relative).read_text(encoding="utf-8")
    return re.findall(r"^\s*resource\s+(\w+)\s+'", text, flags=re.MULTILINE)


@dataclass(frozen=True)
class Resource:
    symbol: str
    type: str
    existing: bool
    condition: Json | None
    body: dict[str, Json]


def resources(doc: dict[str, Json]) -> Iterator[Resource]:
    for symbol, res in doc.get("resources", {}).items():
        config = res["config"]
        condition = None
        if "loop_type" in config:
            condition, bodies = expand_loop(_FILE_OF[id(doc)], config)
            for index, body in enumerate(bodies):
                yield Resource(f"{symbol}[{index}]", res["type"], res["existing"], condition, body)
            continue
        # `resource x '...' = if (cond) { ... }` parses as {"condition": ..., "config": {...}}.
        if set(config) == {"condition", "config"}:
            condition, config = config["condition"], config["config"]
        yield Resource(symbol, res["type"], res["existing"], condition, config)


def resources_of_type(doc: dict[str, Json], type_: str) -> list[Resource]:
    return [r for r in resources(doc) if r.type == type_ and not r.existing]


def one_resource(doc: dict[str, Json], type_: str) -> Resource:
    found = resources_of_type(doc, type_)
    assert len(found) == 1, f"expected exactly one {type_}, found {[r.symbol for r in found]}"
    return found[0]


def named_resource(relative: str, type_: str, name: str) -> Resource:
    """The one resource of `type_` in infra/<relative> whose name, as deployed, is `name`."""
    found = [
        r
        for r in resources_of_type(parse(relative), type_)
        if resolve(relative, r.body["name"]) == name
    ]
    assert len(found) == 1, f"expected exactly one {type_} named {name!r}, found {len(found)}"
    return found[0]


def get_path(body: Json, dotted: str) -> Json:
    node = body
    for part in dotted.split("."):
        assert isinstance(node, dict) and part in node, f"{dotted!r}: no {part!r} in {node!r}"
        node = node[part]
    return node


def strip_quotes(key: str) -> str:
    """Object keys that needed quotes in Bicep keep them in pycep's output."""
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == "'" else key


def module_calls(main: dict[str, Json]) -> dict[str, Json]:
    """Symbolic module name -> pycep module entry, from main.bicep.

    A conditional module (`module x '...' = if (cond) { ... }`) parses with its body one level
    down; here every entry has its body under "config" and its condition (or None) under
    "condition", so callers need not care.
    """
    calls: dict[str, Json] = {}
    for symbol, entry in main.get("modules", {}).items():
        config = entry["config"]
        condition = None
        if set(config) == {"condition", "config"}:
            condition, config = config["condition"], config["config"]
        calls[symbol] = {**entry, "config": config, "condition": condition}
    return calls


def module_symbol_for(relative: str) -> str | None:
    """The symbolic name main.bicep gives the module at infra/<relative>."""
    for symbol, call in module_calls(parse(MAIN)).items():
        if call["detail"]["path"] == relative:
            return symbol
    return None


def _is_unary_minus(value: Json) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("operator"), dict)
        and value["operator"].get("type") == "minus"
        and set(value["operator"].get("operands", {})) == {"integer_value"}
    )


def _is_equals(value: Json) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("operator"), dict)
        and value["operator"].get("type") == "equals"
    )


def _is_operator(value: Json, kind: str) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("operator"), dict)
        and value["operator"].get("type") == kind
    )


def _is_literal(value: Json) -> bool:
    return isinstance(value, (str, int, float, bool))


def _is_function(value: Json, kind: str) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("function"), dict)
        and value["function"].get("type") == kind
    )


def expand_loop(relative: str, loop: dict[str, Json]) -> tuple[Json | None, list[Json]]:
    """(condition, one body per element) of `[for x in array: body]` or `[for (x, i) in ...]`.

    The array must resolve to a list; `cond ? array : []` expands `array` under `cond`."""
    detail = loop["loop_type"]["detail"]
    array, condition = detail["array_name"], None
    if _is_operator(array, "conditional") and array["operator"]["operands"]["false_value"] == []:
        condition = array["operator"]["operands"]["condition"]
        array = array["operator"]["operands"]["true_value"]
    elements = resolve(relative, array)
    assert isinstance(elements, list), f"cannot expand a loop over {array!r}"
    bodies = []
    for index, element in enumerate(elements):
        bindings: dict[str, Json] = {detail["item_name"]: element}
        if "index_name" in detail:
            bindings[detail["index_name"]] = index
        bodies.append(_substitute(loop["config"], bindings))
    return condition, bodies


def _substitute(value: Json, bindings: dict[str, Json]) -> Json:
    """`value` with a loop's item and index names replaced by one element's values: `x` and
    `x.field` by the element's, and `symbol[i]` by the expanded resource's name `symbol[<i>]`."""
    if isinstance(value, str):
        return bindings.get(value, value)
    if isinstance(value, list):
        return [_substitute(item, bindings) for item in value]
    if not isinstance(value, dict):
        return value
    operator = value.get("operator")
    if isinstance(operator, dict) and operator.get("type") == "property_accessor":
        owner = _substitute(operator["operands"]["operand_1"], bindings)
        field = operator["operands"]["operand_2"]
        if isinstance(owner, dict) and isinstance(field, str) and field in owner:
            return owner[field]
    if isinstance(operator, dict) and operator.get("type") == "index_accessor":
        symbol = operator["operands"]["operand_1"]
        index = _substitute(operator["operands"]["operand_2"], bindings)
        if isinstance(symbol, str) and isinstance(index, int):
            return f"{symbol}[{index}]"
    return {key: _substitute(item, bindings) for key, item in value.items()}


def resolve(relative: str, value: Json, _depth: int = 0) -> Json:
    """Evaluate `value` from infra/<relative> as deployed by `azd up` with default parameters.

    A module parameter takes the value main.bicep passes (resolved in main.bicep), else its
    default. Values that are not plain references or literals come back unchanged.
    """
    assert _depth < 20, f"reference cycle while resolving {value!r}"
    doc = parse(relative)
    if _is_unary_minus(value):
        inner = resolve(relative, value["operator"]["operands"]["integer_value"], _depth + 1)
        return -inner if isinstance(inner, int) else value
    if _is_equals(value):
        operands = value["operator"]["operands"]
        left = resolve(relative, operands["operand_1"], _depth + 1)
        right = resolve(relative, operands["operand_2"], _depth + 1)
        return left == right if _is_literal(left) and _is_literal(right) else value
    if _is_operator(value, "and"):
        operands = value["operator"]["operands"]
        left = resolve(relative, operands["operand_1"], _depth + 1)
        right = resolve(relative, operands["operand_2"], _depth + 1)
        return left and right if isinstance(left, bool) and isinstance(right, bool) else value
    if _is_operator(value, "conditional"):
        operands = value["operator"]["operands"]
        condition = resolve(relative, operands["condition"], _depth + 1)
        if isinstance(condition, bool):
            chosen = operands["true_value"] if condition else operands["false_value"]
            return resolve(relative, chosen, _depth + 1)
        return value
    if isinstance(value, dict) and "loop_type" in value:
        condition, bodies = expand_loop(relative, value)
        if condition is not None:
            return value
        return [_resolve_object(relative, body, _depth) for body in bodies]
    if _is_function(value, "concat"):
        parts = [
            resolve(relative, part, _depth + 1) for part in value["function"]["parameters"].values()
        ]
        return (
            [item for part in parts for item in part]
            if all(isinstance(p, list) for p in parts)
            else value
        )
    chain = accessor_chain(value)
    if chain is not None and len(chain) > 1:
        return _resolve_chain(relative, chain, value, _depth)
    if not isinstance(value, str):
        return value
    variables = doc.get("variables", {})
    parameters = doc.get("parameters", {})
    if value in variables:
        return resolve(relative, variables[value]["value"], _depth + 1)
    if value in parameters:
        symbol = module_symbol_for(relative) if relative != MAIN else None
        if symbol is not None:
            passed = module_calls(parse(MAIN))[symbol]["config"].get("params", {})
            if value in passed:
                return resolve(MAIN, passed[value], _depth + 1)
        return resolve(relative, parameters[value]["default"], _depth + 1)
    return value


def _resolve_object(relative: str, value: Json, depth: int) -> Json:
    """An object or array literal with each of its values resolved."""
    if isinstance(value, list):
        return [_resolve_object(relative, item, depth) for item in value]
    if isinstance(value, dict) and not {"operator", "function", "loop_type"} & set(value):
        return {key: _resolve_object(relative, item, depth) for key, item in value.items()}
    return resolve(relative, value, depth + 1)


def accessor_chain(value: Json) -> list[str] | None:
    """`a.b.c` -> ["a", "b", "c"]; `parent::child.name` -> ["parent__child", "name"]."""
    if isinstance(value, str):
        return [value]
    if not (isinstance(value, dict) and isinstance(value.get("operator"), dict)):
        return None
    operator = value["operator"]
    kind = operator.get("type")
    if kind not in ("property_accessor", "nested_resource_accessor"):
        return None
    left = accessor_chain(operator["operands"]["operand_1"])
    right = accessor_chain(operator["operands"]["operand_2"])
    if left is None or right is None:
        return None
    if kind == "nested_resource_accessor":
        return [f"{left[-1]}__{right[0]}", *right[1:]] if len(left) == 1 else None
    return [*left, *right]


def _resolve_chain(relative: str, chain: list[str], original: Json, depth: int) -> Json:
    """Follow `module.outputs.x` (from main.bicep) and `resource.name` to their values."""
    doc = parse(relative)
    head, rest = chain[0], chain[1:]
    modules = doc.get("modules", {})
    if head in modules and rest[:1] == ["outputs"] and len(rest) == 2:
        target = modules[head]["detail"]["path"]
        output = parse(target)["outputs"].get(rest[1])
        return original if output is None else resolve(target, output["value"], depth + 1)
    if rest == ["name"]:
        body = next((r.body for r in resources(doc) if r.symbol == head), None)
        if body is not None:
            return resolve(relative, body["name"], depth + 1)
    return original
