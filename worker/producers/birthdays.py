"""The birthday scheduler as a worker producer: due events become birthday emails, missed ones are marked."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from worker.birthdays import run_scheduler, schedule_missing_async
from worker.config import Settings
from worker.producers import Producer

# Triggers keep every person scheduled; the full set-based pass is only a safety net, run when this
# process starts and then hourly (it reads every person, so not on each wake-up).
REPAIR_EVERY_SECONDS = 3600.0
_last_repair: float | None = None


async def run_once(conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
    """Finish one batch of due birthday events (and, now and then, schedule anyone left unscheduled)."""
    global _last_repair
    handled = (await run_scheduler(conn, settings)).handled
    if _last_repair is None or time.monotonic() - _last_repair >= REPAIR_EVERY_SECONDS:
        _last_repair = time.monotonic()
        handled += await schedule_missing_async(conn, settings)
    return handled


# Due times are minutes apart at most for a zone, so a 15-second look suffices; people changes wake it.
PRODUCER = Producer("birthdays", run_once, channels=("mailroom_events",), interval_seconds=15.0)
