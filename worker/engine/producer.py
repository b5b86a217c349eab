"""What the worker runs beside delivery: a producer is a background task with its channels and interval.

A producer's `run_once` does one bounded unit of work in its own transaction on the connection it is
given and returns how many items it handled; the worker calls it again at once while it returns more
than zero, and otherwise waits for a NOTIFY on one of its channels or for its interval to pass. The
command line decides which producers a worker runs (`worker.cli.wiring`); the engine only runs them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from worker.core.config import Settings

RunOnce = Callable[[psycopg.AsyncConnection[Any], Settings], Awaitable[int]]


@dataclass(frozen=True)
class Producer:
    """A background task of the worker: what wakes it, how often it looks anyway, what it does."""

    name: str
    run_once: RunOnce
    channels: tuple[str, ...] = ()
    interval_seconds: float = 30.0
