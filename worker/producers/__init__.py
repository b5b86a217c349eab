"""Producers: the tasks that turn other systems' state into email, run inside `mailroom worker`.

Each module in this package that defines a module-level `PRODUCER` is picked up by the worker. A
producer's `run_once` does one bounded unit of work in its own transaction on the connection it is
given and returns how many items it handled; the worker calls it again at once while it returns more
than zero, and otherwise waits for a NOTIFY on one of its channels or for its interval to pass.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from worker.config import Settings

RunOnce = Callable[[psycopg.AsyncConnection[Any], Settings], Awaitable[int]]


@dataclass(frozen=True)
class Producer:
    """A background task of the worker: what wakes it, how often it looks anyway, what it does."""

    name: str
    run_once: RunOnce
    channels: tuple[str, ...] = ()
    interval_seconds: float = 30.0


def registered() -> list[Producer]:
    """Every producer defined in this package, in module-name order."""
    found: list[Producer] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        producer = getattr(module, "PRODUCER", None)
        if isinstance(producer, Producer):
            found.append(producer)
    return found
