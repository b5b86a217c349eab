"""Layering: the worker engine never imports Textual or the console."""

from __future__ import annotations

import subprocess
import sys

import worker


def test_worker_package_imports_without_textual() -> None:
    modules = sorted(p.stem for p in __import__("pathlib").Path(worker.__file__).parent.glob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('worker.' + name if name != '__init__' else 'worker')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'console'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
