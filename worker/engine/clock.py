"""The engine's clock: what it reads for due times, backoff and waits, so tests move time instead of sleeping.

Due times live in the database and are compared with the database's `now()`, so every worker judges
them by one clock whatever its host's drifts. The engine's clock therefore says how far it runs
`ahead` of the database: 0 for the system clock (the database decides, as it always did); a
`MovedClock` a test has moved forward makes the engine see backed-off retries and scheduled email as
due that many seconds early, without anyone sleeping. Leases stay on the database's clock alone:
another worker judges them, and moving one worker's clock must never let it take another's claim.
Its steady clock (`monotonic`) says how long this worker's own leases are still known to hold
(`worker.engine.leases.HeldLeases`); a test makes the process `stand_still` past one.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Time as the engine reads it."""

    @property
    def ahead(self) -> float:
        """Seconds this clock runs ahead of the database's `now()` (what SQL due checks add to it)."""
        ...

    def now(self) -> datetime:
        """Wall-clock time, UTC."""
        ...

    def monotonic(self) -> float:
        """Steady seconds for deadlines and intervals (a wall clock that jumps leaves it be)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait this long."""
        ...


class SystemClock:
    """The host's clocks; due times judged by the database's."""

    ahead = 0.0

    def now(self) -> datetime:
        """The host's wall-clock time, UTC."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """`time.monotonic()`."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """`asyncio.sleep`."""
        await asyncio.sleep(seconds)


class MovedClock(SystemClock):
    """The system clock moved forward by `advance` calls: what is due in that many seconds is due now."""

    def __init__(self) -> None:
        self.ahead = 0.0
        self.stood_still = 0.0

    def advance(self, seconds: float) -> None:
        """Move wall-clock time (and the due times the engine sees) forward."""
        self.ahead += seconds

    def stand_still(self, seconds: float) -> None:
        """The process stood still this long (paused, swapped out, its event loop starved): steady time
        moved on, and so did the database's, so due times stay where they are."""
        self.stood_still += seconds

    def monotonic(self) -> float:
        """`time.monotonic()` plus how long the process was said to stand still."""
        return time.monotonic() + self.stood_still

    def now(self) -> datetime:
        """The host's wall-clock time plus how far this clock was moved."""
        return datetime.now(UTC) + timedelta(seconds=self.ahead)


SYSTEM = SystemClock()
