"""Retention and maintenance: archive old email of every final state, purge the inbox, create and drop monthly partitions.

Archiving is `worker.ops.archiving` (one step per final state: sent, failed, expired, cancelled,
suppressed, each after its own age). Partitions are made one month at a time; rows of a month that
already sit in the default partition are moved into the month's new partition. Every step reports
how many rows it touched, and the run reports per final state what it archived and deleted.
"""

from __future__ import annotations

import logging
import re
from datetime import date, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from worker.core.config import Settings
from worker.core.logs import event
from worker.ops.archive_files import ArchiveError, archive_directory, day_start, directory_lock, send_log_path
from worker.ops.archive_retention import expire_archives
from worker.ops.archiving import DELETE_CHUNK, FINAL_STATES, Checkpoint, Progress, archive_state
from worker.ops.audit_retention import link_audit, prune_audit
from worker.ops.chunked_delete import Purge
from worker.ops.dmarc_retention import purge_dmarc_reports
from worker.ops.maintenance_report import MaintenanceReport, StateCounts, StepReport
from worker.ops.oauth_sessions import purge_oauth_sessions
from worker.ops.quarantine_upkeep import purge_quarantine
from worker.ops.send_log_archive import archive_month
from worker.ops.webhook_retention import purge_webhook_events

__all__ = ["MAINTENANCE_LOCK_KEY", "MaintenanceReport", "StateCounts", "StepReport", "run_maintenance"]

log = logging.getLogger(__name__)

MAINTENANCE_LOCK_KEY = 7_243_003  # pg_advisory_lock key: one maintenance run at a time
PARTITIONED = {"send_logs": "attempted_at", "open_events": "occurred_at", "click_events": "occurred_at"}
# Written to archive files before they leave the database; opens and clicks are dropped (their
# counts live on in campaign figures).
ARCHIVED = frozenset({"send_logs"})


COUNT_OLD_INBOX = "SELECT count(*) FROM mailroom.inbox WHERE received_at < %s"
DELETE_OLD_INBOX = """
DELETE FROM mailroom.inbox WHERE (message_id, consumer) IN
    (SELECT message_id, consumer FROM mailroom.inbox WHERE received_at < %s LIMIT %s)
"""
PURGE_INBOX = Purge(
    "purge_inbox", COUNT_OLD_INBOX, DELETE_OLD_INBOX, DELETE_CHUNK, "inbox rows received before"
)


def purge_inbox(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Delete inbox rows received more than `inbox_retention_days` ago (the de-duplication window)."""
    return PURGE_INBOX.run(conn, now - timedelta(days=settings.inbox_retention_days), report)


def _first(row: Any) -> Any:
    assert row is not None
    return row[0] if isinstance(row, tuple) else next(iter(row.values()))


def _month(day: date, offset: int) -> date:
    index = day.year * 12 + day.month - 1 + offset
    return date(index // 12, index % 12 + 1, 1)


def ensure_partitions(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Create the monthly partitions from this month through `partitions_ahead_months` ahead."""
    step = StepReport("create_partitions")
    this_month = _month(now.date(), 0)
    months = settings.partitions_ahead_months + 1
    for parent in PARTITIONED:
        if report.dry_run:
            for i in range(months):
                name = f"{parent}_{_month(this_month, i):%Y_%m}"
                row = conn.execute("SELECT to_regclass(%s) IS NULL", (f"mailroom.{name}",)).fetchone()
                if _first(row):
                    step.rows += 1
                    step.details.append(f"would create {name}")
            continue
        created = 0
        # One month at a time: a month that cannot be made does not keep the later ones from being made.
        for i in range(months):
            month = _month(this_month, i)
            try:
                with conn.transaction():
                    made, moved = _create_partition(conn, parent, month)
            except psycopg.Error as exc:
                report.errors.append(f"create_partitions {parent} {month:%Y-%m}: {exc}")
                log.error(
                    "maintenance: cannot create the %s partition of %s: %s", f"{month:%Y-%m}", parent, exc
                )
                continue
            created += made
            if moved:
                step.details.append(f"{parent}_{month:%Y_%m}: {moved} row(s) moved in from {parent}_default")
        step.rows += created
        step.details.append(f"{parent}: {created} partition(s) created")
    return step


def _create_partition(conn: psycopg.Connection[Any], parent: str, month: date) -> tuple[bool, int]:
    """Create one monthly partition in the caller's transaction; return (created, rows moved into it).

    Rows of that month may already sit in the default partition (maintenance did not run for longer
    than the months made ahead, and the tracker or the worker went on writing). PostgreSQL refuses
    to create a partition over them, so they are moved into a new table that is then attached.
    """
    name = f"{parent}_{month:%Y_%m}"
    if _first(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"mailroom.{name}",)).fetchone()):
        return False, 0
    conn.execute("SET LOCAL lock_timeout = '10s'")
    start, end = day_start(month), day_start(_month(month, 1))
    default = sql.Identifier("mailroom", f"{parent}_default")
    column = sql.Identifier(PARTITIONED[parent])
    stray = conn.execute(
        sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {} >= %s AND {} < %s)").format(
            default, column, column
        ),
        (start, end),
    ).fetchone()
    if not _first(stray):
        conn.execute("SELECT mailroom.ensure_month_partitions(%s, %s, 1)", (parent, month))
        return True, 0
    table, parent_table = sql.Identifier("mailroom", name), sql.Identifier("mailroom", parent)
    conn.execute(
        sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
            table, parent_table
        )
    )
    moved = conn.execute(
        sql.SQL(
            "WITH moved AS (DELETE FROM {d} WHERE {c} >= %s AND {c} < %s RETURNING *) INSERT INTO {t} SELECT * FROM moved"
        ).format(d=default, c=column, t=table),
        (start, end),
    ).rowcount
    conn.execute(
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
            parent_table, table, sql.Literal(start), sql.Literal(end)
        )
    )
    return True, moved


_PARTITIONS = """
SELECT c.relname
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
JOIN pg_namespace n ON n.oid = p.relnamespace
WHERE n.nspname = 'mailroom' AND p.relname = %s
ORDER BY c.relname
"""


def drop_partitions(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Drop monthly partitions that ended more than `log_retention_months` ago, and such rows of the default ones.

    Send logs are archived first (`worker.ops.send_log_archive`): a month whose archive cannot be
    written stays in the database, and the run reports why.
    """
    step = StepReport("drop_partitions")
    keep_from = _month(now.date(), -settings.log_retention_months)
    for parent, column in PARTITIONED.items():
        pattern = re.compile(rf"^{parent}_(\d{{4}})_(\d{{2}})$")
        names = [r[0] for r in conn.cursor(row_factory=tuple_row).execute(_PARTITIONS, (parent,)).fetchall()]
        for name in names:
            match = pattern.match(name)
            if not match:
                continue
            month = date(int(match[1]), int(match[2]), 1)
            if _month(month, 1) <= keep_from:
                _drop_month(conn, settings, report, step, parent, name, month)
        if parent in ARCHIVED:
            for month in _default_months(conn, parent, column, keep_from):
                _drop_month(conn, settings, report, step, parent, f"{parent}_default", month)
            continue
        default = sql.Identifier("mailroom", f"{parent}_default")
        condition = sql.SQL("{} < %s").format(sql.Identifier(column))
        verb = sql.SQL("SELECT count(*) FROM" if report.dry_run else "DELETE FROM")
        with conn.transaction():
            cur = conn.execute(
                sql.SQL("{} {} WHERE {}").format(verb, default, condition), (day_start(keep_from),)
            )
            old = int(_first(cur.fetchone())) if report.dry_run else cur.rowcount
        if old:
            step.rows += old
            step.details.append(f"{parent}_default: {old} row(s) older than {keep_from}")
    return step


def _default_months(conn: psycopg.Connection[Any], parent: str, column: str, keep_from: date) -> list[date]:
    """The months (UTC) of the default partition's rows older than `keep_from`."""
    query = sql.SQL(
        "SELECT DISTINCT date_trunc('month', {c} AT TIME ZONE 'UTC')::date FROM {t} WHERE {c} < %s ORDER BY 1"
    ).format(c=sql.Identifier(column), t=sql.Identifier("mailroom", f"{parent}_default"))
    return [r[0] for r in conn.cursor(row_factory=tuple_row).execute(query, (day_start(keep_from),))]


def _drop_month(
    conn: psycopg.Connection[Any],
    settings: Settings,
    report: MaintenanceReport,
    step: StepReport,
    parent: str,
    table: str,
    month: date,
) -> None:
    """Drop one month: its partition, or (`table` the default partition) its rows; archived first where kept."""
    whole = not table.endswith("_default")
    ident = sql.Identifier("mailroom", table)
    what = table if whole else f"{table} rows of {month:%Y-%m}"
    try:
        if parent in ARCHIVED:
            directory = archive_directory(settings)
            if report.dry_run:
                rows = _rows_of_month(conn, ident, PARTITIONED[parent], month)
                step.details.append(
                    f"would archive {what} ({rows} row(s)) to {send_log_path(directory, month)}"
                )
            else:
                directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                with directory_lock(directory, wait=False):
                    rows = archive_month(conn, directory, table, month, drop=whole)
                done = f"archived {what} ({rows} row(s)) to {send_log_path(directory, month)}"
                step.details.append(done if rows else f"dropped {what} (0 row(s))")
        else:
            with conn.transaction():
                conn.execute("SET LOCAL lock_timeout = '10s'")
                rows = _rows_of_month(conn, ident, PARTITIONED[parent], month)
                if not report.dry_run:
                    conn.execute(sql.SQL("DROP TABLE {}").format(ident))
            step.details.append(f"{'would drop' if report.dry_run else 'dropped'} {what} ({rows} row(s))")
    except (psycopg.Error, ArchiveError, OSError) as exc:
        report.errors.append(f"drop_partitions {what}: {exc}")
        log.error("maintenance: %s stays in the database: %s", what, exc)
        return
    step.rows += rows


def _rows_of_month(conn: psycopg.Connection[Any], table: sql.Identifier, column: str, month: date) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE {c} >= %s AND {c} < %s").format(
        table, c=sql.Identifier(column)
    )
    return int(_first(conn.execute(query, (day_start(month), day_start(_month(month, 1)))).fetchone()))


def run_maintenance(
    conn: psycopg.Connection[Any],
    settings: Settings,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    checkpoint: Checkpoint | None = None,
    progress: Progress | None = None,
) -> MaintenanceReport:
    """Run every maintenance step once on an autocommit connection, with `now` as the clock.

    Only one run at a time across all processes (an advisory lock); a second one returns at once
    with `skipped` set. A step that fails is reported in `errors`; the other steps still run.
    """
    if not conn.autocommit:
        raise ValueError("run_maintenance needs an autocommit connection: each step commits on its own")
    report = MaintenanceReport(dry_run=dry_run)
    if now is None:
        now = _first(conn.execute("SELECT now()").fetchone())
    assert now is not None
    locked = _first(conn.execute("SELECT pg_try_advisory_lock(%s)", (MAINTENANCE_LOCK_KEY,)).fetchone())
    if not locked:
        report.skipped = "another maintenance run is in progress"
        log.info("maintenance: skipped, %s", report.skipped)
        return report

    def record(step: StepReport) -> None:
        report.steps.append(step)
        suffix = " (dry run)" if dry_run else ""
        # A step with nothing to do is routine (every worker start runs them all): DEBUG, not INFO.
        level = logging.INFO if step.rows else logging.DEBUG
        log.log(level, "maintenance%s: %s touched %d row(s)", suffix, step.name, step.rows)
        if progress:
            progress(f"{step.name}: {step.rows} row(s){suffix}")

    try:
        for state in FINAL_STATES:
            record(archive_state(conn, settings, now, report, state, checkpoint, progress))
        _log_retention(report)
        record(purge_inbox(conn, settings, now, report))
        record(purge_quarantine(conn, settings, now, report))
        record(purge_dmarc_reports(conn, settings, now, report))
        record(purge_oauth_sessions(conn, settings, now, report))
        record(purge_webhook_events(conn, settings, now, report))
        record(link_audit(conn, settings, now, report))
        record(prune_audit(conn, settings, now, report))
        record(ensure_partitions(conn, settings, now, report))
        record(drop_partitions(conn, settings, now, report))
        record(expire_archives(conn, settings, now, report))
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MAINTENANCE_LOCK_KEY,))
    return report


def _log_retention(report: MaintenanceReport) -> None:
    """One line (and its machine-readable fields) saying what retention did with each final state."""
    summary = report.retention_summary()
    text = ", ".join(
        f"{name} {c['archived']} archived / {c['deleted']} deleted" for name, c in summary.items()
    )
    suffix = " (dry run: nothing archived or deleted)" if report.dry_run else ""
    quiet = not any(c["archived"] or c["deleted"] for c in summary.values())
    log.log(
        logging.DEBUG if quiet else logging.INFO,
        "maintenance: retention %s%s",
        text,
        suffix,
        extra=event("retention", dry_run=report.dry_run, **summary),
    )
