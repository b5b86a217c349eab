"""Webhook events' clean-up: a maintenance step deleting events older than
`MAILROOM_WEBHOOK_RETENTION_DAYS` (their deliveries go with them).

An event that old still pending for an endpoint (paused, or disabled by its receiver, for as long) is
given up first (`dead`, said in its last error): the tables never grow without end behind an endpoint
nobody resumes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.ops.chunked_delete import Purge
from worker.ops.maintenance_report import MaintenanceReport, StepReport

DELETE_CHUNK = 5000
_DONE = """occurred_at <= %s AND NOT EXISTS (
    SELECT FROM mailroom.webhook_deliveries d WHERE d.event_id = v.id AND d.status = 'pending')"""

COUNT_OLD = f"SELECT count(*) FROM mailroom.webhook_events v WHERE {_DONE}"  # noqa: S608 - constant text
DELETE_OLD = f"""
DELETE FROM mailroom.webhook_events
WHERE id IN (SELECT v.id FROM mailroom.webhook_events v WHERE {_DONE} LIMIT %s)
"""  # noqa: S608 - constant text

GIVE_UP = """
UPDATE mailroom.webhook_deliveries d
SET status = 'dead', finished_at = now(), leased_until = NULL,
    last_error = 'given up by maintenance: older than MAILROOM_WEBHOOK_RETENTION_DAYS'
FROM mailroom.webhook_events v
WHERE v.id = d.event_id AND d.status = 'pending' AND v.occurred_at <= %s
"""

PURGE = Purge(
    "purge_webhook_events",
    COUNT_OLD,
    DELETE_OLD,
    DELETE_CHUNK,
    "webhook events no endpoint waits for, before",
)


def purge_webhook_events(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Give up the deliveries of events older than the retention, then delete those events."""
    cutoff = now - timedelta(days=settings.webhook_retention_days)
    given_up = 0
    if not report.dry_run:
        with conn.transaction():
            given_up = conn.execute(GIVE_UP, (cutoff,)).rowcount
    step = PURGE.run(conn, cutoff, report)
    step.details.append(f"deliveries given up, still pending past the retention: {given_up}")
    return step
