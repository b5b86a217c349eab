"""The audit trail's maintenance steps: chain the applications' waiting rows, and prune rows older than
`audit_retention_days` (0 keeps all).

An application's row (mailroom.app_audit) waits in mailroom.audit_pending, taking no lock, until the next
audit write or this step chains it. Pruning goes through mailroom.audit_prune, which writes an
`audit.prune` row and records the anchor the kept chain starts from, so `mailroom audit verify` still
passes afterwards.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from worker.core.config import Settings
from worker.ops.audit_chain import COUNT_PENDING, link_pending, prune
from worker.ops.maintenance_report import MaintenanceReport, StepReport

ACTOR = "maintenance"

# What a prune at `cutoff` would remove: the chain's oldest stretch up to the first row at or after it.
COUNT_DUE = """
SELECT count(*) FROM mailroom.audit_log
WHERE seq < coalesce((SELECT min(seq) FROM mailroom.audit_log WHERE at >= %(cutoff)s),
                     (SELECT max(seq) + 1 FROM mailroom.audit_log))
"""


def link_audit(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Chain the applications' audit rows waiting in mailroom.audit_pending."""
    step = StepReport("link_audit")
    try:
        if report.dry_run:
            row = conn.cursor(row_factory=tuple_row).execute(COUNT_PENDING).fetchone()
            step.rows = int(row[0]) if row is not None else 0
        else:
            step.rows = link_pending(conn)
    except psycopg.Error as exc:
        # The head held past the wait (the error names who holds it): the next run chains them.
        report.errors.append(f"link_audit: {exc}")
        return step
    step.details.append(f"applications' audit rows chained: {step.rows}")
    return step


def prune_audit(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Prune audit rows written more than `audit_retention_days` ago (nothing when it is 0)."""
    step = StepReport("prune_audit")
    days = settings.audit_retention_days
    if days <= 0:
        step.details.append("audit rows are kept for ever (MAILROOM_AUDIT_RETENTION_DAYS=0)")
        return step
    cutoff = now - timedelta(days=days)
    try:
        with conn.transaction():
            if report.dry_run:
                row = conn.cursor(row_factory=tuple_row).execute(COUNT_DUE, {"cutoff": cutoff}).fetchone()
                step.rows = int(row[0]) if row is not None else 0
            else:
                reason = f"retention: MAILROOM_AUDIT_RETENTION_DAYS={days}"
                step.rows = prune(conn, cutoff, reason=reason, actor=ACTOR)
    except psycopg.Error as exc:
        # A broken chain is for `mailroom audit verify` to name; the other steps still run.
        report.errors.append(f"prune_audit: {exc}")
        return step
    step.details.append(f"audit rows written before {cutoff.isoformat()}: {step.rows}")
    return step
