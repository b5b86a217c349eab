"""Retention inside `mailroom worker`: runs `worker.ops.retention` every `MAILROOM_MAINTENANCE_INTERVAL_SECONDS`,
then checks every sender's DNS (`worker.ops.dns_checks`).

The schedule is kept in `mailroom.jobs` (row `retention`), so however many workers run, one of them
starts a run per interval; the advisory lock in `run_maintenance` keeps runs from overlapping.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import tuple_row

from worker.core.config import Settings
from worker.engine.producer import Producer

log = logging.getLogger(__name__)

JOB = "retention"

_CLAIM = """
UPDATE mailroom.jobs SET last_run_at = now()
WHERE name = %(job)s
  AND (last_run_at IS NULL OR last_run_at <= now() - make_interval(secs => %(interval)s))
RETURNING now()
"""


async def claim_run(conn: psycopg.AsyncConnection[Any], settings: Settings) -> datetime | None:
    """Take this interval's run if no process took it yet; return the database's `now`, or None."""
    async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(
            "INSERT INTO mailroom.jobs (name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (JOB,)
        )
        await cur.execute(_CLAIM, {"job": JOB, "interval": settings.maintenance_interval_seconds})
        row = await cur.fetchone()
    return None if row is None else row[0]


def _dsn_of(conn: psycopg.AsyncConnection[Any]) -> str:
    """The connection's DSN, with its password when it logged in with one."""
    password = conn.info.password
    return make_conninfo(conn.info.dsn, password=password) if password else conn.info.dsn


async def run_once(conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
    """Run maintenance when its interval has passed (in a child process, `worker.ops.maintenance_child`);
    return 0 either way."""
    now = await claim_run(conn, settings)
    if now is None:
        return 0
    # The worker's own server: the configured URL, else this connection's DSN with the password it
    # logged in with (info.dsn leaves it out: a Worker given its URL apart from its settings, as the
    # tests give it, failed here on a server that checks passwords). Maintenance holds a session advisory lock across its steps,
    # so behind a transaction pooler it takes the direct connection.
    url = settings.database_url or _dsn_of(conn)
    if settings.transaction_pooler and settings.listen_database_url:
        url = settings.listen_database_url
    # In a process of its own: in a thread, its imports and parsing slowed delivery beside it.
    from worker.ops.maintenance_child import run_in_child

    report = await run_in_child(url, settings, now)
    for error in report.errors:
        log.error("maintenance: %s", error)
    # Done until the next interval: returning more than zero would only make the worker ask again at once.
    return 0


PRODUCER = Producer(JOB, run_once, channels=(), interval_seconds=60.0)
