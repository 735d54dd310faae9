"""checkov on infra/ (Bicep framework): zero failed checks, every skip justified in the Bicep.

checkov pins old versions of common packages, so it lives in its own venv, `.venv-checkov`,
which `make test` creates. Without it the scan is skipped locally and fails in CI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest

from .bicep_model import INFRA, REPO_ROOT, bicep_files

CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
COMMAND = [
    str(CHECKOV),
    "-d",
    "infra",
    "--framework",
    "bicep",
    "-o",
    "json",
    "--quiet",
    "--skip-download",
]
SKIP_COMMENT = re.compile(r"checkov:skip=")
# A Bicep line comment with one check id and a reason of a few words.
JUSTIFIED_SKIP = re.compile(r"^\s*// checkov:skip=(CKV2?_AZURE_\d+): (\S+(?: \S+){4,})$")


def _reports(stdout: str) -> list[dict[str, Any]]:
    parsed = json.loads(stdout)
    return parsed if isinstance(parsed, list) else [parsed]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_checkov_finds_no_failed_check() -> None:
    if not CHECKOV.is_file():
        message = f"{CHECKOV} is missing: `make test` creates it from requirements-checkov.txt"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    # BC_SKIP_MAPPING keeps checkov from calling its vendor's API; the package-update check
    # would only add a network timeout.
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CKV_SKIP_PACKAGE_UPDATE_CHECK": "TRUE"}
    result = subprocess.run(
        COMMAND, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=540, check=False
    )
    assert result.stdout.strip(), (
        f"checkov printed nothing (exit {result.returncode}): {result.stderr}"
    )
    reports = _reports(result.stdout)
    bicep = [r for r in reports if r.get("check_type") == "bicep"]
    assert len(bicep) == 1, f"no bicep report in: {result.stdout[:2000]}"
    summary = bicep[0]["summary"]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
        for c in bicep[0]["results"].get("failed_checks", [])
    ]
    assert failed == []
    assert summary["failed"] == 0
    assert summary["parsing_errors"] == 0
    # It really scanned the templates and evaluated checks.
    assert summary["resource_count"] > 0
    assert summary["passed"] > 0
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("relative", bicep_files())
def test_every_checkov_skip_is_a_justified_bicep_comment(relative: str) -> None:
    for number, line in enumerate((INFRA / relative).read_text(encoding="utf-8").splitlines(), 1):
        if SKIP_COMMENT.search(line):
            assert JUSTIFIED_SKIP.match(line), (
                f"{relative}:{number}: write skips as `// checkov:skip=CKV_AZURE_N: <why>` "
                f"with a real reason: {line.strip()}"
            )


STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'")
# checkov bundles an older pycep whose grammar allows at most five newline tokens between two
# entries of an object or array (the entry's own line end + 4 comment or blank lines). A longer
# comment block makes checkov drop the whole file as a parsing error, silently unscanned.
MAX_COMMENT_RUN_IN_BLOCK = 4


@pytest.mark.parametrize("relative", bicep_files())
def test_comment_blocks_inside_objects_stay_parseable_by_checkov(relative: str) -> None:
    depth = 0
    run = 0
    for number, line in enumerate((INFRA / relative).read_text(encoding="utf-8").splitlines(), 1):
        code = STRING_LITERAL.sub("''", line).split("//", 1)[0]
        if depth > 0 and not code.strip():
            run += 1
            assert run <= MAX_COMMENT_RUN_IN_BLOCK, (
                f"{relative}:{number}: more than {MAX_COMMENT_RUN_IN_BLOCK} comment/blank lines "
                "in a row inside an object; move the comment above the resource"
            )
        else:
            run = 0
        depth += code.count("{") + code.count("[") - code.count("}") - code.count("]")
