"""Install a hash-pinned lock file into a virtual environment, fast: `make setup` and `make test`.

    python scripts/install_locked.py --python .venv/bin/python requirements-dev.txt \
        --editable packages/exactly-once --editable .
    python scripts/install_locked.py --python .venv-checkov/bin/python --uv .venv/bin/uv \
        requirements-checkov.txt

uv installs the lock (every package at its pin, each file checked against its hash, bytecode
compiled on both cores) and then this repository's own packages, editable and without resolving
anything again: about 10 s where pip takes over a minute, which a fresh clone's `make test` pays
once per venv. uv itself comes from the same lock, installed by pip with its own pinned
hashes (`--uv` names one already installed), so a machine needs nothing but Python.

uv reads its own settings (`UV_INDEX_URL`, `uv.toml`), not pip's: where uv cannot install the
lock (a package index configured for pip only, say), pip installs it instead, as it did before
uv was used here, and the reason is printed.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

UV_PIN = "uv=="


def pinned_block(lock_text: str, pin_prefix: str) -> str:
    """The requirement `pin_prefix` starts, with its hash lines, as the lock writes it."""
    block: list[str] = []
    for line in lock_text.splitlines():
        if block:
            if not line.startswith(" ") or line.lstrip().startswith("#"):
                break
            block.append(line)
        elif line.startswith(pin_prefix):
            block.append(line)
    if not block:
        raise SystemExit(f"install_locked: no `{pin_prefix}` pin in the lock")
    return "\n".join(block) + "\n"


def pip(python: str) -> list[str]:
    return [python, "-m", "pip", "install", "--quiet"]


def pip_install(python: str, requirements: Path, *extra: str) -> None:
    command = [*pip(python), "--require-hashes", *extra, "-r", str(requirements)]
    subprocess.run(command, check=True)


def install_uv(python: str, lock: Path) -> str:
    """uv from the lock into `python`'s environment (uv has no dependencies); its path."""
    with tempfile.TemporaryDirectory() as scratch:
        pins = Path(scratch) / "uv.txt"
        pins.write_text(pinned_block(lock.read_text(), UV_PIN))
        pip_install(python, pins, "--no-deps")
    return str(Path(python).parent / "uv")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock", type=Path, help="a hash-pinned requirements file")
    parser.add_argument("--python", required=True, help="the venv's interpreter")
    parser.add_argument("--uv", help="a uv to use (default: installed from the lock by pip)")
    parser.add_argument(
        "--editable", action="append", default=[], help="a folder to install editable, no deps"
    )
    args = parser.parse_args(argv)
    uv = args.uv or install_uv(args.python, args.lock)
    editables = [arg for folder in args.editable for arg in ("-e", folder)]
    if installed_with_uv(uv, args.python, args.lock, editables):
        return 0
    print(
        f"install_locked: uv could not install {args.lock} (see above); installing with pip",
        file=sys.stderr,
    )
    subprocess.run([*pip(args.python), "--upgrade", "pip"], check=True)
    pip_install(args.python, args.lock)
    if editables:
        subprocess.run([*pip(args.python), "--no-deps", *editables], check=True)
    return 0


def installed_with_uv(uv: str, python: str, lock: Path, editables: list[str]) -> bool:
    # `install`, not `sync`: sync would remove what the lock does not name (pip among them).
    with_uv = [uv, "pip", "install", "--quiet", "--python", python]
    locked = [*with_uv, "--require-hashes", "--compile-bytecode", "-r", str(lock)]
    if subprocess.run(locked).returncode != 0:
        return False
    return not editables or subprocess.run([*with_uv, "--no-deps", *editables]).returncode == 0


if __name__ == "__main__":
    sys.exit(main())
