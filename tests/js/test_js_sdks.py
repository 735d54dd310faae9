"""Microsoft's JavaScript SDKs (@azure/service-bus, @azure/cosmos) against our emulators.

The Node tests (`*.test.mjs`, node's own test runner, SDK versions pinned in package-lock.json)
start the emulators themselves; this wrapper runs them in `make test`. Without Node they skip
and say why, except in CI (CI=true), where a missing Node or `npm ci` fails the run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NODE_TIMEOUT_SECONDS = 300


@pytest.mark.slow
def test_javascript_sdks_against_our_emulators() -> None:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed: CI runs the JavaScript SDK tests")
        pytest.skip("node is not installed (the JavaScript SDK tests run wherever Node is)")
    if not (HERE / "node_modules" / "@azure" / "service-bus").is_dir():
        pytest.fail("tests/js/node_modules is missing: run `make node-crosscheck` (npm ci)")
    tests = sorted(path.name for path in HERE.glob("*.test.mjs"))
    completed = subprocess.run(
        [node, "--test", "--test-concurrency=1", "--test-reporter=tap", *tests],
        cwd=HERE,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_SECONDS,
        check=False,
    )
    report = completed.stdout + completed.stderr
    print(report)
    assert completed.returncode == 0, report[-20000:]
    # The runner's summary: something ran, and nothing failed or was cancelled.
    summary = dict(re.findall(r"^# (tests|pass|fail|cancelled) (\d+)$", report, re.MULTILINE))
    assert int(summary.get("tests", "0")) > 0, report[-20000:]
    assert summary.get("fail") == "0" and summary.get("cancelled") == "0", report[-20000:]
