"""Re-lock the Python dependencies: `make lock` (or `python scripts/lock.py`), with uv installed.

The lock is three hash-pinned requirement files, each generated from what declares it:

- `requirements.txt`: [project].dependencies of pyproject.toml, for the Functions deployment
  (the remote build runs `pip install -r requirements.txt`, which checks every hash);
- `requirements-dev.txt`: the same plus the `dev` extra, what `make setup` installs;
- `requirements-checkov.txt`: `requirements-checkov.in`, checkov's own venv (`make test`).

Requirement files rather than `uv.lock`: pip reads them, so a machine without uv, the CI runner
and the Functions remote build all install the same pins and hashes; and they name no package
index, so the lock works with whichever index pip or uv is configured to use.

Each file's first line records a digest of its inputs (the requirement strings exactly as
declared), so tests/infra/test_packaging.py fails when a bound changes without a re-lock.

The app depends on packages of this repository (the `exactly-once-azure` core, found through
`[tool.uv.sources]`): uv resolves what they need from their own pyproject.toml, and their own
line is left out of the lock, as pip's hash-checking mode refuses a folder (it has no hash).
`make setup` installs them from their folders; their declared dependencies count as inputs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The oldest Python the project supports: the resolution is universal (markers for every
# platform and for every later Python), so it holds for 3.12 deployments too.
PYTHON_VERSION = "3.11"
DIGEST_PREFIX = "# inputs-sha256: "


@dataclass(frozen=True)
class Lock:
    output: str
    # What uv compiles: pyproject.toml (with `extras`) or a requirements .in file.
    source: str
    extras: tuple[str, ...] = ()


LOCKS = (
    Lock("requirements.txt", "pyproject.toml"),
    Lock("requirements-dev.txt", "pyproject.toml", ("dev",)),
    Lock("requirements-checkov.txt", "requirements-checkov.in"),
)


def local_packages(lock: Lock, repo: Path = REPO) -> dict[str, Path]:
    """Name -> folder of each package of this repository that `lock`'s source depends on (its
    `[tool.uv.sources]` entries with a `path`)."""
    source = repo / lock.source
    if source.suffix != ".toml":
        return {}
    sources = tomllib.loads(source.read_text()).get("tool", {}).get("uv", {}).get("sources", {})
    return {name: repo / entry["path"] for name, entry in sources.items() if "path" in entry}


def declared_inputs(lock: Lock, repo: Path = REPO) -> list[str]:
    """The requirement strings `lock` is generated from, exactly as written: those of its
    source, then those of the repository's own packages it depends on (all their extras)."""
    source = repo / lock.source
    if source.suffix == ".toml":
        project = tomllib.loads(source.read_text())["project"]
        inputs = list(project["dependencies"])
        for extra in lock.extras:
            inputs += project["optional-dependencies"][extra]
        for folder in local_packages(lock, repo).values():
            package = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
            inputs += package["dependencies"]
            for requirements in package.get("optional-dependencies", {}).values():
                inputs += requirements
        return inputs
    lines = (line.split("#", 1)[0].strip() for line in source.read_text().splitlines())
    return [line for line in lines if line]


def inputs_digest(inputs: list[str]) -> str:
    return hashlib.sha256(json.dumps(sorted(inputs)).encode()).hexdigest()


def recorded_digest(lock: Lock, repo: Path = REPO) -> str | None:
    """The digest the lock file was generated with (its first line), if any."""
    first_line = (repo / lock.output).read_text().partition("\n")[0]
    return first_line.removeprefix(DIGEST_PREFIX) if first_line.startswith(DIGEST_PREFIX) else None


def compile_lock(uv: str, lock: Lock, upgrade: bool) -> None:
    command = [
        uv,
        "pip",
        "compile",
        lock.source,
        "--universal",
        "--python-version",
        PYTHON_VERSION,
        "--generate-hashes",
        "--quiet",
        "--custom-compile-command",
        "make lock",
        "--output-file",
        lock.output,
    ]
    for extra in lock.extras:
        command += ["--extra", extra]
    for name in local_packages(lock):
        command += ["--no-emit-package", name]
    if upgrade:
        command.append("--upgrade")
    subprocess.run(command, cwd=REPO, check=True)
    path = REPO / lock.output
    text = path.read_text()
    digest = inputs_digest(declared_inputs(lock))
    path.write_text(f"{DIGEST_PREFIX}{digest}\n{text}")


def main(argv: list[str]) -> int:
    upgrade = "--upgrade" in argv
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(uv).exists():
        print("uv not found: `make setup` installs it into .venv (the dev extra)", file=sys.stderr)
        return 1
    for lock in LOCKS:
        compile_lock(uv, lock, upgrade)
        print(f"locked {lock.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
