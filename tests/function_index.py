"""The functions the Azure Functions host indexes from a checkout's function_app.py.

The host indexes by importing function_app.py and listing its app's functions; this does the
same in a fresh interpreter (an app indexes once per process), from any copy of the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

_INDEX = (
    "import json, os, function_app\n"
    "print(json.dumps({f.get_function_name(): json.loads(f.get_function_json())['bindings']"
    " for f in function_app.app.get_functions()}), flush=True)\n"
    "os._exit(0)\n"
)


def indexed_functions(
    root: Path = REPO_ROOT, env: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Function name -> its bindings, as the host indexes `root`/function_app.py."""
    base = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("APPLICATIONINSIGHTS_", "PYTHONPATH"))
    }
    result = subprocess.run(
        [sys.executable, "-c", _INDEX],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **(env or {})},
        cwd=str(root),
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, list[dict[str, Any]]] = json.loads(result.stdout.strip().splitlines()[-1])
    return found
