"""Retention of every final state: email older than its state's age is archived to files, read back, then deleted.

Each final state has its own age: sent (`archive_after_days`, by `sent_at`), failed, expired,
cancelled and suppressed (`archive_<state>_after_days`, by `finished_at`). "Expired" is failed email
the queue lifetime ended (recorded as its `failure_kind`, see `worker.engine.outcomes.FailureKind`);
"failed" is every other failed email. Pending and assigned email is never read nor deleted here.

Each state's email is written to one gzip JSON-lines file per UTC day (see `archive_files`). A file
is written whole to a temporary name, synced and renamed, then read back; only the ids found in the
complete file are deleted from the queue, and only while they are still in that state and still
older than its age (an operator may `retry` a failed email meanwhile: it stays, and its archived
record is history). A run killed at any instant therefore loses nothing: either the file was not
renamed (the next run writes it again) or it is complete (the next run merges the day's remaining
rows into it, skipping emails it already holds, and deletes them). An email is "already held" only
when the file's record has the same id and creation time: a file of another database (or of this
one before a reset) holding other emails under the same ids stops its day with an error, deleting
nothing. Files are rewritten under an exclusive `flock` of the archive directory (privacy erasures
rewrite them too), so two databases configured with one directory never replace each other's files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from worker.core.config import Settings
from worker.engine.outcomes import FailureKind
from worker.ops.archive_files import (
    ArchiveError,
    archive_directory,
    archive_path,
    day_start,
    directory_lock,
    read_archive,
    write_archive_atomically,
)
from worker.ops.maintenance_report import MaintenanceReport, StateCounts, StepReport

log = logging.getLogger(__name__)

DELETE_CHUNK = 10_000

# Called with (stage, day): "written" (temporary file complete, not yet renamed), "archived" (file
# renamed and read back), "deleted" (the day's rows left the queue). Tests stop a run at each.
Checkpoint = Callable[[str, date], None]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class FinalState:
    """One final state retention archives: which rows it is, which timestamp ages them, which setting."""

    name: str
    status: str
    column: str
    # Extra condition on the row (constant SQL; %(expired)s is the failure kind of the queue lifetime).
    condition: str
    age_days: Callable[[Settings], int]


FINAL_STATES: tuple[FinalState, ...] = (
    FinalState("sent", "sent", "sent_at", "", lambda s: s.archive_after_days),
    # Sent, then reported undeliverable by a DSN: kept as long as sent email, by the same clock.
    FinalState("bounced", "bounced", "sent_at", "", lambda s: s.archive_after_days),
    FinalState(
        "failed",
        "failed",
        "finished_at",
        "AND q.failure_kind IS DISTINCT FROM %(expired)s",
        lambda s: s.archive_failed_after_days,
    ),
    FinalState(
        "expired",
        "failed",
        "finished_at",
        "AND q.failure_kind = %(expired)s",
        lambda s: s.archive_expired_after_days,
    ),
    FinalState("cancelled", "cancelled", "finished_at", "", lambda s: s.archive_cancelled_after_days),
    FinalState("suppressed", "suppressed", "finished_at", "", lambda s: s.archive_suppressed_after_days),
)

# The rows of one state older than its cutoff. The status is written into the statement as a literal
# (one of the constants above, never input) so that its partial index (status = '...') can serve it.
_OLD = "q.status = {status} AND q.{column} < %(cutoff)s {condition}"
_DAYS = """
SELECT (q.{column} AT TIME ZONE 'UTC')::date AS day, count(*) AS n
FROM mailroom.email_queue q
WHERE {old}
GROUP BY 1 ORDER BY 1
"""
# The database writes each record: every column of the email (final status and last error
# included), and the tracked links that go with it.
_DAY_ROWS = """
SELECT q.id, q.created_at, (to_jsonb(q) || jsonb_build_object('tracked_links', coalesce(
           (SELECT jsonb_agg(to_jsonb(l) - 'email_id' ORDER BY l.position)
            FROM mailroom.tracked_links l WHERE l.email_id = q.id), '[]'::jsonb)))::text
FROM mailroom.email_queue q
WHERE {old} AND q.{column} >= %(start)s AND q.{column} < %(end)s
ORDER BY q.id
"""
# Checked again as the rows go: one that left its state (or was finished anew) since it was read stays.
_DELETE_ARCHIVED = "DELETE FROM mailroom.email_queue q WHERE q.id = ANY(%(ids)s) AND {old}"


def _statement(template: str, state: FinalState) -> sql.Composed:
    old = sql.SQL(_OLD).format(
        status=sql.Literal(state.status),
        column=sql.Identifier(state.column),
        condition=sql.SQL(state.condition),
    )
    return sql.SQL(template).format(old=old, column=sql.Identifier(state.column))


def _created_at(record: dict[str, Any]) -> datetime | None:
    value = record.get("created_at")
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def archive_day(
    conn: psycopg.Connection[Any],
    directory: Path,
    day: date,
    cutoff: datetime,
    checkpoint: Checkpoint | None = None,
    state: FinalState = FINAL_STATES[0],
) -> tuple[int, int]:
    """Archive one day's email of `state` older than `cutoff`, then delete it; return (records written, rows deleted)."""
    path = archive_path(directory, day, state.name)
    params = {"cutoff": cutoff, "expired": FailureKind.EXPIRED.value}
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
        bounds = {"start": day_start(day), "end": day_start(day) + timedelta(days=1)}
        with conn.transaction(), conn.cursor(name="mailroom_archive_day", row_factory=tuple_row) as cur:
            cur.itersize = 2000
            cur.execute(_statement(_DAY_ROWS, state), params | bounds)
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
    delete = _statement(_DELETE_ARCHIVED, state)
    for start in range(0, len(wanted), DELETE_CHUNK):
        with conn.transaction():
            deleted += conn.execute(delete, params | {"ids": wanted[start : start + DELETE_CHUNK]}).rowcount
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


def archive_state(
    conn: psycopg.Connection[Any],
    settings: Settings,
    now: datetime,
    report: MaintenanceReport,
    state: FinalState,
    checkpoint: Checkpoint | None = None,
    progress: Progress | None = None,
) -> StepReport:
    """Archive and delete email of one final state older than its age, one file per UTC day."""
    step = StepReport(f"archive_{state.name}")
    days_old = state.age_days(settings)
    cutoff = now - timedelta(days=days_old)
    counts = report.retention.setdefault(state.name, StateCounts(days_old, cutoff.isoformat()))
    directory = archive_directory(settings)
    params = {"cutoff": cutoff, "expired": FailureKind.EXPIRED.value}
    days = conn.cursor(row_factory=tuple_row).execute(_statement(_DAYS, state), params).fetchall()
    counts.due = sum(int(n) for _, n in days)
    if report.dry_run:
        for day, n in days:
            step.rows += int(n)
            step.details.append(
                f"{day}: would archive {n} email(s) to {archive_path(directory, day, state.name)}"
            )
        return step
    for day, _ in days:
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            with directory_lock(directory, wait=False):
                written, deleted = archive_day(conn, directory, day, cutoff, checkpoint, state)
        except (ArchiveError, OSError) as exc:
            report.errors.append(f"archive_{state.name} {day}: {exc}")
            log.error(
                "maintenance: archive of %s email of %s failed, nothing of it deleted: %s",
                state.name,
                day,
                exc,
            )
            continue
        step.rows += deleted
        counts.archived += written
        counts.deleted += deleted
        line = (
            f"{day}: {deleted} email(s) deleted, {written} new record(s)"
            f" in {archive_path(directory, day, state.name)}"
        )
        step.details.append(line)
        if progress:
            progress(f"archive_{state.name} {line}")
    return step
