"""A module of an extra, imported without that extra, says which extra to install.

`exactly_once` itself needs neither FastAPI nor pydantic; `IdempotencyKeys` needs the `fastapi`
extra and `@idempotent` the `pydantic` extra. Each check runs in a fresh interpreter where the
extra's package cannot be imported (a finder refuses it), as on a machine without it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE_AND_IMPORT = """
import sys

class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Hidden())
import exactly_once  # the core itself imports without the extra
try:
    {statement}
except ModuleNotFoundError as error:
    print(f"{{error.name}}|{{error}}")
else:
    print("imported")
"""


@pytest.mark.parametrize(
    ("hidden", "statement", "extra"),
    [
        (
            ("fastapi", "starlette"),
            "from exactly_once.http import IdempotencyKeys",
            "fastapi",
        ),
        (("pydantic", "pydantic_core"), "from exactly_once import idempotent", "pydantic"),
    ],
)
def test_an_extras_module_without_the_extra_names_the_extra(
    hidden: tuple[str, ...], statement: str, extra: str
) -> None:
    code = HIDE_AND_IMPORT.format(hidden=set(hidden), statement=statement)
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    name, _, message = run.stdout.strip().partition("|")
    assert name in hidden, run.stdout
    assert f"pip install 'exactly-once-azure[{extra}]'" in message, message
