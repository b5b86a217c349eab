"""Deleting rows past a cutoff a chunk at a time, each chunk in its own transaction: the retention steps'
one loop (inbox, bounce quarantine, DMARC reports, login sessions), and the one step they all are.

A chunk's transaction is short, so the application's writes and the worker's claims never queue
behind one huge DELETE, and a run killed half-way keeps what it deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from worker.ops.maintenance_report import MaintenanceReport, StepReport


def delete_in_chunks(
    conn: psycopg.Connection[Any], *, count: str, delete: str, cutoff: object, chunk: int, dry_run: bool
) -> int:
    """Rows past `cutoff`: counted by `count` on a dry run, else deleted by `delete` (parameters: the cutoff
    and the chunk size, as `... WHERE key IN (SELECT key ... WHERE t < %s LIMIT %s)`) until a chunk comes
    back short. Returns how many."""
    cur = conn.cursor(row_factory=tuple_row)
    if dry_run:
        row = cur.execute(count, (cutoff,)).fetchone()
        return int(row[0]) if row is not None else 0
    total = 0
    while True:
        with conn.transaction():
            done = cur.execute(delete, (cutoff, chunk)).rowcount
        total += done
        if done < chunk:
            return total


@dataclass(frozen=True)
class Purge:
    """One retention step: what it deletes in chunks, and how its report line reads."""

    name: str  # the step's name in the maintenance report
    count: str  # rows past the cutoff (parameter: the cutoff), for a dry run
    delete: str  # a chunk of them, as `delete_in_chunks` takes it
    chunk: int
    described: str  # the report line's start, e.g. "inbox rows received before"
    daily: str | None = None  # per-day counts of the same days (parameter: the cutoff's UTC date)

    def run(self, conn: psycopg.Connection[Any], cutoff: datetime, report: MaintenanceReport) -> StepReport:
        """Delete the rows past `cutoff` (count them on a dry run), then the per-day counts of those days."""
        step = StepReport(self.name)
        step.rows = delete_in_chunks(
            conn,
            count=self.count,
            delete=self.delete,
            cutoff=cutoff,
            chunk=self.chunk,
            dry_run=report.dry_run,
        )
        if self.daily is not None and not report.dry_run:
            with conn.transaction():
                conn.execute(self.daily, (cutoff.astimezone(UTC).date(),))
        step.details.append(f"{self.described} {cutoff.isoformat()}: {step.rows}")
        return step
