"""The README leads a newcomer on: the Quick start's two commands, then "Next steps" pointing
into docs/, all in under 250 lines; every relative link of the README and docs/ names a file
that exists (the rest of what the README held lives in docs/ now)."""

from __future__ import annotations

import re

from documented_commands import DOCUMENTS, REPO

README = REPO / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def headings() -> list[str]:
    return [
        line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("## ")
    ]


def test_the_readme_is_short_and_next_steps_follow_the_quick_start() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()

    assert len(lines) < 250
    assert headings()[:2] == ["## Quick start", "## Next steps"]


def test_every_relative_link_of_the_docs_names_a_file_that_exists() -> None:
    broken = []
    for document in DOCUMENTS:
        for target in LINK.findall(document.read_text(encoding="utf-8")):
            if re.match(r"^(https?|mailto):", target):
                continue
            if not (document.parent / target).exists():
                broken.append(f"{document.relative_to(REPO)}: {target}")
    assert broken == []
