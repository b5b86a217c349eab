"""Webhook events' clean-up: a maintenance step deleting events older than
`MAILROOM_WEBHOOK_RETENTION_DAYS` that no endpoint still waits for (their deliveries go with them).

An event still pending for some endpoint (paused, or failing within its retry window) is kept however
old: it is deleted once it is delivered or given up.
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
    """Delete webhook events (and their deliveries) older than the retention that nobody waits for."""
    return PURGE.run(conn, now - timedelta(days=settings.webhook_retention_days), report)
