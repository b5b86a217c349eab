"""DMARC reports' retention: a maintenance step deleting reports stored more than `dmarc_retention_days` ago.

Records go with their report (ON DELETE CASCADE); reports are deleted in chunks, each in a
transaction of its own, like the other logs' retention. The days of refusals health reads
(`mailroom.dmarc_refusals`) go with the same cutoff.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.ops.chunked_delete import Purge
from worker.ops.maintenance_report import MaintenanceReport, StepReport

# Reports per transaction: each carries its records (up to tens of thousands), so fewer than archiving's rows.
DELETE_CHUNK = 500

COUNT_OLD = "SELECT count(*) FROM mailroom.dmarc_reports WHERE received_at < %s"
DELETE_OLD_REFUSALS = "DELETE FROM mailroom.dmarc_refusals WHERE day < %s"
DELETE_OLD = """
DELETE FROM mailroom.dmarc_reports
WHERE id IN (SELECT id FROM mailroom.dmarc_reports WHERE received_at < %s LIMIT %s)
"""

PURGE = Purge(
    "purge_dmarc_reports",
    COUNT_OLD,
    DELETE_OLD,
    DELETE_CHUNK,
    "DMARC reports received before",
    daily=DELETE_OLD_REFUSALS,
)


def purge_dmarc_reports(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Delete DMARC reports (and their records) received more than `dmarc_retention_days` ago."""
    return PURGE.run(conn, now - timedelta(days=settings.dmarc_retention_days), report)
