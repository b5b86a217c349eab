#!/usr/bin/env python3
"""Bootstrap Mailroom's virtual environment and run it: `python3 tasks.py demo` or `python3 tasks.py test`.

Needs nothing but Python 3.11+ and git. The environment lives in `.venv/` and is
rebuilt whenever `pyproject.toml` changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".mailroom-deps"


def _say(message: str) -> None:
    print(f"[tasks] {message}", flush=True)


def _run(*args: str | Path) -> None:
    result = subprocess.run([str(a) for a in args], cwd=ROOT, check=False)
    if result.returncode != 0:
        sys.exit(result.returncode)


def ensure_venv() -> None:
    """Create `.venv` and install Mailroom with its dev extras when missing or stale."""
    if sys.version_info < (3, 11):
        sys.exit("Mailroom needs Python 3.11 or newer.")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        return
    if not PYTHON.exists():
        _say(f"creating virtual environment in {VENV.name}/")
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    _say("installing Mailroom and its dependencies (first run takes a minute)")
    _run(PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", ".[dev]")
    STAMP.write_text(wanted)


def test(extra: list[str]) -> None:
    """Lint, type-check, check the architecture contract, then run the whole test suite."""
    ensure_venv()
    _say("ruff")
    _run(BIN / "ruff", "check", "worker", "console", "migrations", "tests", "bench", "tasks.py")
    _run(BIN / "ruff", "format", "--check", "worker", "console", "migrations", "tests", "bench", "tasks.py")
    _say("mypy --strict")
    _run(BIN / "mypy")
    _say("import-linter")
    _run(BIN / "lint-imports")
    _say("pytest")
    _run(PYTHON, "-m", "pytest", *extra)


def main() -> None:
    """Dispatch `test`, `demo` or any other `mailroom` subcommand inside the virtual environment."""
    args = sys.argv[1:]
    if not args or args[0] in {"-h", "--help"}:
        print(__doc__)
        print(
            "usage: python3 tasks.py test [PYTEST ARGS] | python3 tasks.py demo | python3 tasks.py mailroom ARGS"
        )
        return
    command, rest = args[0], args[1:]
    if command == "test":
        test(rest)
    elif command == "demo":
        ensure_venv()
        os.execv(str(BIN / "mailroom"), [str(BIN / "mailroom"), "demo", *rest])
    elif command == "mailroom":
        ensure_venv()
        os.execv(str(BIN / "mailroom"), [str(BIN / "mailroom"), *rest])
    else:
        sys.exit(f"unknown task {command!r}; try: test, demo, mailroom")


if __name__ == "__main__":
    main()
