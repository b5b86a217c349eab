"""Birthday scheduling at scale: `python -m bench.birthdays [PEOPLE]` (default 1,000,000).

Prints the time of:
  1. loading PEOPLE people in one INSERT (validation triggers, and the statement trigger that schedules
     their next birthday in the same statement);
  2. the set-based scheduling pass (`mailroom.schedule_birthdays`, in two sessions) over all of them with
     no event yet;
  3. claiming due events (SKIP LOCKED, batches of 100) with PEOPLE pending events in the table;
  4. finishing the events due over one day (email enqueued, event completed, next year's scheduled).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

import psycopg

from bench.common import database
from worker.core.config import Settings
from worker.producers.birthdays import claim_due, run_scheduler, schedule_everyone

ZONES = [
    "America/New_York",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Europe/London",
    "Europe/Paris",
    "Europe/Moscow",
    "Africa/Lagos",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
]

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SESSIONS = 2  # the development machine has two cores

LOAD = """
INSERT INTO mailroom.people (email, first_name, last_name, date_of_birth, time_zone)
SELECT 'person' || i || '@example.com', 'First' || i, 'Last' || i,
       DATE '1950-01-01' + (hashint4(i) & 2147483647) %% 20000,
       (%(zones)s::text[])[1 + (hashint4(i + 7) & 2147483647) %% %(nzones)s]
FROM generate_series(1, %(n)s) AS i
"""


def _timed(label: str, started: float) -> float:
    elapsed = time.perf_counter() - started
    print(f"{label}: {elapsed:.2f} s", flush=True)
    return elapsed


async def _claims(url: str, at: datetime) -> list[float]:
    """Claim every event due by `at` in batches of 100; return each claim's duration in ms."""
    durations: list[float] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            started = time.perf_counter()
            claimed = await claim_due(conn, now=at, limit=100)
            durations.append((time.perf_counter() - started) * 1000)
            if not claimed:
                return durations


async def _finish_day(url: str, settings: Settings, at: datetime) -> int:
    finished = 0
    # As in the worker's pool: asynchronous commit (an event and its email are one transaction either way).
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, options="-c synchronous_commit=off"
    ) as conn:
        while True:
            done = await run_scheduler(conn, settings, now=at, limit=100)
            finished += done.handled
            if not done.handled:
                return finished


def main(people: int) -> None:
    """Run the four measurements on a throwaway database (or MAILROOM_DATABASE_URL, emptied)."""
    with database() as url:
        settings = Settings(database_url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE mailroom.people, mailroom.events, mailroom.email_queue CASCADE")
            conn.execute("SELECT set_config('mailroom.now', %s, false)", (NOW.isoformat(),))
            print(f"loading {people:,} people in {len(ZONES)} time zones ...", flush=True)
            started = time.perf_counter()
            conn.execute(LOAD, {"zones": ZONES, "nzones": len(ZONES), "n": people})
            _timed("1. insert + validate + schedule in the same statement", started)
            conn.execute("VACUUM ANALYZE mailroom.people")
            conn.execute("TRUNCATE mailroom.events")

            conn.execute("CHECKPOINT")

        started = time.perf_counter()
        created = schedule_everyone(url, settings, now=NOW, sessions=SESSIONS)
        elapsed = _timed(f"2. set-based scheduling pass ({SESSIONS} sessions)", started)
        print(f"   {created:,} events created ({created / elapsed:,.0f} people/s)")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE mailroom.events")

        day = NOW + timedelta(days=1)
        started = time.perf_counter()
        durations = asyncio.run(_claims(url, day))
        total = _timed("3. claiming one day's due events, batches of 100", started)
        with psycopg.connect(url) as conn:
            due = conn.execute("SELECT count(*) FROM mailroom.events WHERE status = 'processing'").fetchone()
            # hand them back for step 4
            conn.execute("UPDATE mailroom.events SET status = 'pending' WHERE status = 'processing'")
        claimed = int(due[0]) if due else 0
        print(
            f"   {claimed:,} claimed in {len(durations)} claims: first {durations[0]:.2f} ms,"
            f" median {statistics.median(durations):.2f} ms,"
            f" max {max(durations):.2f} ms ({claimed / total:,.0f} events/s)"
        )

        started = time.perf_counter()
        finished = asyncio.run(_finish_day(url, settings, day))
        elapsed = _timed("4. finishing them (email enqueued, completed, next year scheduled)", started)
        print(f"   {finished:,} events ({finished / elapsed:,.0f} events/s)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
