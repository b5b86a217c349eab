"""The bounce quarantine's upkeep: a maintenance step that deletes what is past its retention, and its fill for health.

The intake keeps the quarantine within its size and per-client bounds as messages arrive
(`worker.producers.bounces.quarantine`); what it kept is deleted here once older than
`quarantine_retention_days`, with the per-client counts of the same days.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from worker.core.config import Settings
from worker.ops.chunked_delete import Purge
from worker.ops.maintenance_report import MaintenanceReport, StepReport

# Rows deleted per transaction, as archiving does (imported from there it would pull the engine into the console).
DELETE_CHUNK = 10_000

COUNT_OLD = "SELECT count(*) FROM mailroom.bounce_quarantine WHERE received_at < %s"
DELETE_OLD = """
DELETE FROM mailroom.bounce_quarantine
WHERE id IN (SELECT id FROM mailroom.bounce_quarantine WHERE received_at < %s LIMIT %s)
"""
DELETE_OLD_COUNTS = "DELETE FROM mailroom.bounce_quarantine_clients WHERE day < %s"

PURGE = Purge(
    "purge_quarantine",
    COUNT_OLD,
    DELETE_OLD,
    DELETE_CHUNK,
    "quarantined messages received before",
    daily=DELETE_OLD_COUNTS,
)

# What the intake holds the quarantine's size to (worker.producers.bounces.quarantine.TOTAL), kept by
# triggers in one row; and what was dropped today.
USAGE = """
SELECT s.bytes, s.messages,
       (SELECT coalesce(sum(dropped), 0) FROM mailroom.bounce_quarantine_clients
        WHERE day = (now() AT TIME ZONE 'UTC')::date) AS dropped_today
FROM mailroom.bounce_quarantine_size s
"""


@dataclass(frozen=True)
class QuarantineUsage:
    """What the bounce quarantine holds, and how many messages it dropped today (UTC)."""

    bytes: int
    messages: int
    dropped_today: int


def quarantine_usage(conn: psycopg.Connection[Any]) -> QuarantineUsage:
    """Bytes and messages held, messages dropped today."""
    row = conn.cursor(row_factory=tuple_row).execute(USAGE).fetchone()
    assert row is not None
    return QuarantineUsage(int(row[0]), int(row[1]), int(row[2]))


def purge_quarantine(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Delete quarantined messages received more than `quarantine_retention_days` ago, and their counts."""
    return PURGE.run(conn, now - timedelta(days=settings.quarantine_retention_days), report)
