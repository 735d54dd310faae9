"""What the docs say about commands and limits in running text matches the code: every
`.venv/bin/orders ...` usage names a real command, its options exist, its required arguments
are shown; the line limit quoted is the parser's."""

from __future__ import annotations

import re
from typing import Any

import typer
from documented_commands import DOCUMENTS, REPO

from orders.cli import app
from orders.domain.messages import MAX_LINES_PER_ORDER

INLINE = re.compile(r"`(\.venv/bin/orders [^`]+)`")


def usages() -> list[tuple[str, str]]:
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for match in INLINE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{document.relative_to(REPO)}:{line}", match.group(1)))
    return found


def resolve(group: Any, words: list[str]) -> tuple[Any, list[str]]:
    """The deepest command the leading words name, and the words left over."""
    command = group
    while words and hasattr(command, "commands") and words[0] in command.commands:
        command = command.commands[words[0]]
        words = words[1:]
    return command, words


def problems_of(usage: str, root: Any) -> list[str]:
    segments = [segment.strip() for segment in usage.removeprefix(".venv/bin/orders ").split("\\|")]
    words = segments[0].split()
    command, rest = resolve(root, words)
    parent = root
    path = words[: len(words) - len(rest)]
    if path[:-1]:
        parent, _ = resolve(root, path[:-1])
    checked = [(command, rest)]
    for segment in segments[1:]:
        first, *others = segment.split() or [""]
        if hasattr(parent, "commands") and first in parent.commands:
            checked.append((parent.commands[first], others))
        else:
            checked[-1][1].extend([first, *others])  # an alternative value of an option
    problems = []
    for found, tokens in checked:
        if hasattr(found, "commands"):
            continue  # a group named in passing ("orders dlq ...")
        options = {opt for param in found.params for opt in (*param.opts, *param.secondary_opts)}
        for token in tokens:
            option = token.strip("[]()").split("=")[0]
            if option.startswith("--") and option not in options:
                problems.append(f"{found.name}: no option {option}")
        required = [p for p in found.params if p.required and not p.opts[0].startswith("-")]
        placeholders = [t for t in tokens if re.fullmatch(r"[A-Z][A-Z_.]*", t.strip("[]"))]
        if len(placeholders) < len(required):
            names = [p.name.upper() for p in required]
            problems.append(f"{found.name}: required {names} not shown")
    return problems


def test_every_documented_usage_is_a_real_command_with_its_arguments() -> None:
    root = typer.main.get_command(app)
    found = usages()
    assert len(found) > 20
    problems = [
        f"{where}: `{usage}`: {problem}"
        for where, usage in found
        for problem in problems_of(usage, root)
    ]
    assert not problems, "\n".join(problems)


def test_the_documented_line_limit_is_the_parsers() -> None:
    quoted = [
        (document.name, int(number))
        for document in DOCUMENTS
        for number in re.findall(
            r"(?:>|more than) (\d+) lines", document.read_text(encoding="utf-8")
        )
    ]
    assert quoted and all(number == MAX_LINES_PER_ORDER for _, number in quoted), quoted
