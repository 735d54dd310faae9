"""What a reader sees before anything runs: a script's help names the script, and `make test`
says what it installs system-wide before it does."""

from __future__ import annotations

import subprocess
import sys

import pytest
from documented_commands import REPO


@pytest.mark.parametrize("script", ["load", "verify"])
def test_a_wrapper_scripts_help_names_the_script(script: str) -> None:
    result = subprocess.run(
        [sys.executable, f"scripts/{script}.py", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Usage: scripts/{script}.py [OPTIONS]")


def recipe(target: str) -> str:
    lines = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    body = []
    for line in lines[start + 1 :]:
        if line and not line.startswith("\t"):
            break
        body.append(line)
    return "\n".join(body)


def test_make_test_announces_the_system_wide_install_before_it_runs() -> None:
    browser = recipe("browser")
    first_install = browser.index("apt-get install")
    announcement = browser.find("SYSTEM-WIDE")
    assert 0 <= announcement < first_install, "say what apt installs before it installs it"
    # `make test` prepares the browser (as a prerequisite or in the recipe's preparation step)
    # before the first pytest command starts.
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    prerequisites = makefile.split("\ntest:", 1)[1].splitlines()[0]
    commands = recipe("test").replace("\\\n", " ").splitlines()
    before_pytest = commands[: next(i for i, c in enumerate(commands) if "pytest" in c)]
    assert "browser" in prerequisites or any("browser" in c.split() for c in before_pytest)
