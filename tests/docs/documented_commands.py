"""The shell commands of README.md and docs/*.md, as a reader copies them: every fenced
`bash`/`sh`/`shell` block line (continuations joined) and every `$ ` line of a `console` block
with the output the docs show under it."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
SHELL_FENCES = frozenset({"bash", "sh", "shell", "console"})
FENCE = re.compile(r"^```(\S*)\s*$")
ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


class Kind(StrEnum):
    """What it takes to run a documented command."""

    LOCAL = "runs locally"  # run by the docs test against the stack it starts
    SERVER = "local server"  # started by the docs test in the background, as documented
    LONG_RUNNING = "long-running"  # minutes, or until Ctrl-C: not run by the docs test
    AZURE = "needs Azure"
    DOCKER = "needs Docker"


@dataclass(frozen=True)
class DocCommand:
    document: str  # relative to the repo
    line: int
    text: str  # as a shell runs it: continuations joined, prompt and trailing comment removed
    comment: str  # the trailing `# ...` a reader sees beside it
    output: tuple[str, ...]  # what a console block shows under it ("" lines kept)
    console: bool

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def split_comment(line: str) -> tuple[str, str]:
    """`command  # comment` -> (command, comment); a `#` inside quotes stays in the command."""
    for match in re.finditer(r"\s#", line):
        before = line[: match.start()]
        try:
            shlex.split(before)
        except ValueError:  # inside an open quote
            continue
        return before.rstrip(), line[match.end() :].strip()
    return line.rstrip(), ""


def _joined(lines: list[str], start: int) -> tuple[str, int]:
    """The logical line starting at `start` (backslash continuations joined), and the next."""
    text = lines[start]
    index = start
    while text.rstrip().endswith("\\") and index + 1 < len(lines):
        command, comment = split_comment(text.rstrip()[:-1])
        index += 1
        text = command + " " + lines[index].strip() + (f"  # {comment}" if comment else "")
    return text, index + 1


def extract(path: Path) -> list[DocCommand]:
    found: list[DocCommand] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    relative = str(path.relative_to(REPO))
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening or not opening.group(1):
            index += 1
            continue
        language = opening.group(1)
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        if language in SHELL_FENCES:
            found += _block(relative, lines, index + 1, end, console=language == "console")
        index = end + 1
    return found


def _block(relative: str, lines: list[str], start: int, end: int, *, console: bool) -> list[Any]:
    commands: list[DocCommand] = []
    index = start
    block = lines[:end]
    while index < end:
        raw = block[index]
        # Blank lines, a reader's note on a line of its own, console output without a prompt.
        if (
            not raw.strip()
            or raw.lstrip().startswith("#")
            or (console and not raw.startswith("$ "))
        ):
            index += 1
            continue
        line_number = index + 1
        text, index = _joined(block, index)
        output: list[str] = []
        if console:
            text = text.removeprefix("$ ")
            while index < end and not block[index].startswith("$ "):
                output.append(block[index])
                index += 1
            while output and not output[-1].strip():
                output.pop()
        command, comment = split_comment(text)
        commands.append(
            DocCommand(relative, line_number, command.strip(), comment, tuple(output), console)
        )
    return commands


def every_command() -> list[DocCommand]:
    return [command for document in DOCUMENTS for command in extract(document)]


def key(command: DocCommand) -> str:
    """How the classification table names a command: its text, whitespace collapsed."""
    return " ".join(command.text.split())


# --- what a documented output promises ---------------------------------------------------------


@dataclass(frozen=True)
class HttpOutput:
    status: int | None
    headers: frozenset[str]
    body: Any  # parsed JSON, or None


def parse_http_output(lines: tuple[str, ...] | list[str]) -> HttpOutput:
    """`curl -i` output as the docs show it (or as curl prints it): status, header names, JSON."""
    lines = [line.rstrip("\r") for line in lines]
    status: int | None = None
    headers: set[str] = set()
    rest = lines
    if lines and lines[0].startswith("HTTP/"):
        status = int(lines[0].split()[1])
        blank = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
        headers = {line.split(":", 1)[0].strip().lower() for line in lines[1:blank]}
        rest = lines[blank + 1 :]
    text = " ".join(line.strip() for line in rest).strip()
    body = json.loads(text) if text else None
    return HttpOutput(status, frozenset(headers), body)


def shape_differences(documented: Any, actual: Any, path: str = "$") -> list[str]:
    """Where `actual` does not look like what the docs show: the same keys and list lengths,
    the same values, except that a documented ISO-8601 time only needs to be one."""
    if isinstance(documented, dict):
        if not isinstance(actual, dict):
            return [f"{path}: documented an object, got {actual!r}"]
        problems = []
        if set(documented) != set(actual):
            problems.append(f"{path}: keys {sorted(documented)} documented, {sorted(actual)} got")
        for name in set(documented) & set(actual):
            problems += shape_differences(documented[name], actual[name], f"{path}.{name}")
        return problems
    if isinstance(documented, list):
        if not isinstance(actual, list) or len(actual) != len(documented):
            return [f"{path}: documented {documented!r}, got {actual!r}"]
        return [
            problem
            for index, (doc, got) in enumerate(zip(documented, actual, strict=True))
            for problem in shape_differences(doc, got, f"{path}[{index}]")
        ]
    if isinstance(documented, str) and ISO_TIME.match(documented):
        return [] if isinstance(actual, str) and ISO_TIME.match(actual) else [f"{path}: time?"]
    return [] if documented == actual else [f"{path}: documented {documented!r}, got {actual!r}"]
