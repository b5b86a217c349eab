"""Subcommand groups of `mailroom`, one module each.

Every module here defines `register(sub)`, which adds its parsers to the top-level subparsers and
sets `handler` (a `(args, settings) -> exit status` function) on each. `worker.cli.main` discovers them.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

Registrar = Callable[["argparse._SubParsersAction[Any]"], None]


def registrars() -> list[Registrar]:
    """The `register` function of every module in this package, in module-name order."""
    found: list[Registrar] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if callable(register):
            found.append(register)
    return found
