"""Retention and maintenance: archive old sent email, purge the inbox, create and drop monthly partitions.

Sent email older than `archive_after_days` is written to one gzip JSON-lines file per UTC day of
`sent_at` (`emails-YYYY-MM-DD.jsonl.gz` in the archive directory). A file is written whole to a
temporary name, synced and renamed, then read back; only the ids found in the complete file are
deleted from the queue. A run killed at any instant therefore loses nothing: either the file was not
renamed (the next run writes it again) or it is complete (the next run merges the day's remaining
rows into it, skipping emails it already holds, and deletes them). An email is "already held" only
when the file's record has the same id and creation time: a file of another database (or of this one
before a reset) holding other emails under the same ids stops its day with an error, deleting nothing.
Files are rewritten under an exclusive `flock` of the archive directory (privacy erasures rewrite
them too), so two databases configured with one directory never replace each other's files.
Partitions are made one month at a time; rows of a month that already sit in the default partition
are moved into the month's new partition. Every step reports how many rows it
touched.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from worker.core.config import Settings
from worker.ops.archive_files import (
    ArchiveError,
    archive_directory,
    archive_path,
    directory_lock,
    read_archive,
    write_archive_atomically,
)

if sys.platform != "win32":
    pass

log = logging.getLogger(__name__)

MAINTENANCE_LOCK_KEY = 7_243_003  # pg_advisory_lock key: one maintenance run at a time
PARTITIONED = {"send_logs": "attempted_at", "open_events": "occurred_at", "click_events": "occurred_at"}
DELETE_CHUNK = 10_000
# zlib's default level: level 9 (gzip's default) costs about twice the time for a few percent less size.

# Called with (stage, day): "written" (temporary file complete, not yet renamed), "archived" (file
# renamed and read back), "deleted" (the day's rows left the queue). Tests stop a run at each.
Checkpoint = Callable[[str, date], None]
Progress = Callable[[str], None]


@dataclass
class StepReport:
    """One maintenance step: how many rows it touched (or would touch, in a dry run) and what it did."""

    name: str
    rows: int = 0
    details: list[str] = field(default_factory=list)


@dataclass
class MaintenanceReport:
    """Everything one run did; `errors` lists what it could not do (the rest still ran)."""

    dry_run: bool
    steps: list[StepReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def total(self) -> int:
        """Rows touched by every step."""
        return sum(step.rows for step in self.steps)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly form for `--json` output."""
        return {
            "dry_run": self.dry_run,
            "skipped": self.skipped,
            "steps": [{"name": s.name, "rows": s.rows, "details": s.details} for s in self.steps],
            "errors": self.errors,
        }


_DAYS = """
SELECT (sent_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n
FROM mailroom.email_queue
WHERE status = 'sent' AND sent_at < %(cutoff)s
GROUP BY 1 ORDER BY 1
"""
# The database writes each record: every column of the email, and the tracked links that go with it.
_DAY_ROWS = """
SELECT q.id, q.created_at, (to_jsonb(q) || jsonb_build_object('tracked_links', coalesce(
           (SELECT jsonb_agg(to_jsonb(l) - 'email_id' ORDER BY l.position)
            FROM mailroom.tracked_links l WHERE l.email_id = q.id), '[]'::jsonb)))::text
FROM mailroom.email_queue q
WHERE q.status = 'sent' AND q.sent_at >= %(start)s AND q.sent_at < %(end)s AND q.sent_at < %(cutoff)s
ORDER BY q.id
"""
_DELETE_ARCHIVED = "DELETE FROM mailroom.email_queue WHERE id = ANY(%s) AND status = 'sent'"


def _created_at(record: dict[str, Any]) -> datetime | None:
    value = record.get("created_at")
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def archive_day(
    conn: psycopg.Connection[Any],
    directory: Path,
    day: date,
    cutoff: datetime,
    checkpoint: Checkpoint | None = None,
) -> tuple[int, int]:
    """Archive one day's sent email older than `cutoff`, then delete it; return (records written, rows deleted)."""
    path = archive_path(directory, day)
    wanted: list[int] = []
    written = 0

    def lines() -> Iterator[str]:
        nonlocal written
        # id -> created_at of each email the file already holds (None when the record lacks it).
        seen: dict[int, datetime | None] = {}
        if path.exists():
            for email_id, line in read_archive(path):
                if email_id not in seen:
                    seen[email_id] = _created_at(json.loads(line))
                    yield line
        params = {"start": _day_start(day), "end": _day_start(day) + timedelta(days=1), "cutoff": cutoff}
        with conn.transaction(), conn.cursor(name="mailroom_archive_day", row_factory=tuple_row) as cur:
            cur.itersize = 2000
            cur.execute(_DAY_ROWS, params)
            for email_id, created_at, record in cur:
                if email_id in seen:
                    # The same id in the file must be the same email (created_at never changes). If it
                    # is not, the file came from another database (or one since reset): deleting this
                    # email on the strength of that record would lose it.
                    if seen[email_id] != created_at:
                        raise ArchiveError(
                            f"{path} holds an email {email_id} created at {seen[email_id]}, but the database's"
                            f" email {email_id} was created at {created_at}: the file belongs to another"
                            " database; move it aside to archive that day again"
                        )
                else:
                    seen[email_id] = created_at
                    written += 1
                    yield record + "\n"
                wanted.append(int(email_id))

    write_archive_atomically(path, lines(), (lambda: checkpoint("written", day)) if checkpoint else None)
    _check_written(path, wanted)
    if checkpoint:
        checkpoint("archived", day)
    deleted = 0
    for start in range(0, len(wanted), DELETE_CHUNK):
        with conn.transaction():
            deleted += conn.execute(_DELETE_ARCHIVED, (wanted[start : start + DELETE_CHUNK],)).rowcount
    if checkpoint:
        checkpoint("deleted", day)
    return written, deleted


def _check_written(path: Path, wanted: list[int]) -> None:
    """Read back what is on disk now: only what the complete file holds may leave the database."""
    stored: set[int] = set()
    for email_id, _ in read_archive(path):
        if email_id in stored:
            raise ArchiveError(f"{path} holds email {email_id} twice")
        stored.add(email_id)
    missing = [i for i in wanted if i not in stored]
    if missing:
        raise ArchiveError(f"{path} lacks {len(missing)} email(s) it was written with, e.g. {missing[0]}")


def archive_sent(
    conn: psycopg.Connection[Any],
    settings: Settings,
    now: datetime,
    report: MaintenanceReport,
    checkpoint: Checkpoint | None = None,
    progress: Progress | None = None,
) -> StepReport:
    """Archive and delete sent email older than `archive_after_days`, one file per UTC day."""
    step = StepReport("archive_sent")
    cutoff = now - timedelta(days=settings.archive_after_days)
    directory = archive_directory(settings)
    days = conn.cursor(row_factory=tuple_row).execute(_DAYS, {"cutoff": cutoff}).fetchall()
    if report.dry_run:
        for day, n in days:
            step.rows += int(n)
            step.details.append(f"{day}: would archive {n} email(s) to {archive_path(directory, day)}")
        return step
    for day, _ in days:
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            with directory_lock(directory, wait=False):
                written, deleted = archive_day(conn, directory, day, cutoff, checkpoint)
        except (ArchiveError, OSError) as exc:
            report.errors.append(f"archive_sent {day}: {exc}")
            log.error("maintenance: archive of %s failed, nothing of it deleted: %s", day, exc)
            continue
        step.rows += deleted
        line = f"{day}: {deleted} email(s) deleted, {written} new record(s) in {archive_path(directory, day)}"
        step.details.append(line)
        if progress:
            progress(f"archive_sent {line}")
    return step


def purge_inbox(
    conn: psycopg.Connection[Any], settings: Settings, now: datetime, report: MaintenanceReport
) -> StepReport:
    """Delete inbox rows received more than `inbox_retention_days` ago (the de-duplication window)."""
    step = StepReport("purge_inbox")
    cutoff = now - timedelta(days=settings.inbox_retention_days)
    if report.dry_run:
        row = conn.execute("SELECT count(*) FROM mailroom.inbox WHERE received_at < %s", (cutoff,)).fetchone()
        step.rows = int(_first(row))
    else:
        while True:
            with conn.transaction():
                done = conn.execute(
                    "DELETE FROM mailroom.inbox WHERE (message_id, consumer) IN (SELECT message_id, consumer"
                    " FROM mailroom.inbox WHERE received_at < %s LIMIT %s)",
                    (cutoff, DELETE_CHUNK),
                ).rowcount
            step.rows += done
            if done < DELETE_CHUNK:
                break
    step.details.append(f"inbox rows received before {cutoff.isoformat()}: {step.rows}")
    return step


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
    start, end = _day_start(month), _day_start(_month(month, 1))
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
    """Drop monthly partitions that ended more than `log_retention_months` ago, and such rows of the default ones."""
    step = StepReport("drop_partitions")
    keep_from = _month(now.date(), -settings.log_retention_months)
    for parent, column in PARTITIONED.items():
        pattern = re.compile(rf"^{parent}_(\d{{4}})_(\d{{2}})$")
        names = [r[0] for r in conn.cursor(row_factory=tuple_row).execute(_PARTITIONS, (parent,)).fetchall()]
        for name in names:
            match = pattern.match(name)
            if not match or _month(date(int(match[1]), int(match[2]), 1), 1) > keep_from:
                continue
            table = sql.Identifier("mailroom", name)
            try:
                with conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '10s'")
                    rows = int(
                        _first(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone())
                    )
                    if not report.dry_run:
                        conn.execute(sql.SQL("DROP TABLE {}").format(table))
            except psycopg.Error as exc:
                report.errors.append(f"drop_partitions {name}: {exc}")
                continue
            step.rows += rows
            step.details.append(f"{'would drop' if report.dry_run else 'dropped'} {name} ({rows} row(s))")
        default = sql.Identifier("mailroom", f"{parent}_default")
        condition = sql.SQL("{} < %s").format(sql.Identifier(column))
        verb = sql.SQL("SELECT count(*) FROM" if report.dry_run else "DELETE FROM")
        with conn.transaction():
            cur = conn.execute(
                sql.SQL("{} {} WHERE {}").format(verb, default, condition), (_day_start(keep_from),)
            )
            old = int(_first(cur.fetchone())) if report.dry_run else cur.rowcount
        if old:
            step.rows += old
            step.details.append(f"{parent}_default: {old} row(s) older than {keep_from}")
    return step


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
        log.info("maintenance%s: %s touched %d row(s)", suffix, step.name, step.rows)
        if progress:
            progress(f"{step.name}: {step.rows} row(s){suffix}")

    try:
        record(archive_sent(conn, settings, now, report, checkpoint, progress))
        record(purge_inbox(conn, settings, now, report))
        record(ensure_partitions(conn, settings, now, report))
        record(drop_partitions(conn, settings, now, report))
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MAINTENANCE_LOCK_KEY,))
    return report
