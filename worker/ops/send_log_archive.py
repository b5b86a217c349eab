"""Send logs past their retention are written to one archive file per month before they leave the database.

`archive_month` writes every row of one month (of its partition, or of the default partition) to
`send-logs-YYYY-MM.jsonl.gz` in id order, merged with what the file already holds, reads the file
back, and only then drops the partition (or deletes the month's rows of the default one) in a
transaction that counts the rows again: a row written to that month meanwhile keeps the month in
the database until the next run. A run killed at any instant loses nothing: the file is either
not renamed yet or complete, and the next run merges the same rows into it without doubling them.
Memory stays flat whatever a month holds: the file and the rows are merged as two sorted streams.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from worker.ops.archive_files import (
    ArchiveError,
    day_start,
    read_archive,
    send_log_path,
    write_archive_atomically,
)

_ROWS = """
SELECT l.id, l.attempted_at, to_jsonb(l)::text
FROM {table} l
WHERE l.attempted_at >= %(start)s AND l.attempted_at < %(end)s
ORDER BY l.id
"""
_TALLY = """
SELECT count(*), coalesce(sum(l.id), 0)
FROM {table} l
WHERE l.attempted_at >= %(start)s AND l.attempted_at < %(end)s
"""
_DELETE = "DELETE FROM {table} l WHERE l.attempted_at >= %(start)s AND l.attempted_at < %(end)s"


@dataclass
class Tally:
    """How many rows, and the sum of their ids: what the file must hold and the table must still have."""

    rows: int = 0
    id_sum: int = 0

    def add(self, row_id: int) -> None:
        self.rows += 1
        self.id_sum += row_id


def _instant(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _file_records(path: Path) -> Iterator[tuple[int, datetime | None, str]]:
    """(id, attempted_at, line) of each record the file holds; ids must rise strictly."""
    if not path.exists():
        return
    last = 0
    for row_id, line in read_archive(path):
        if row_id <= last:
            raise ArchiveError(f"{path}: send log {row_id} is out of order; move the file aside")
        last = row_id
        yield row_id, _instant(json.loads(line).get("attempted_at")), line


def _merged(
    conn: psycopg.Connection[Any],
    path: Path,
    table: sql.Composable,
    bounds: dict[str, Any],
    seen: Tally,
    out: Tally,
) -> Iterator[str]:
    """The file's records and the month's rows, merged by id; a row the file holds already is not written twice.

    `seen` tallies the month's rows read, `out` every record written.
    """
    held = _file_records(path)
    pending = next(held, None)
    with conn.transaction(), conn.cursor(name="mailroom_archive_logs", row_factory=tuple_row) as cur:
        cur.itersize = 5000
        cur.execute(sql.SQL(_ROWS).format(table=table), bounds)
        for row_id, attempted_at, record in cur:
            while pending is not None and pending[0] < row_id:
                out.add(pending[0])
                yield pending[2]
                pending = next(held, None)
            seen.add(int(row_id))
            if pending is not None and pending[0] == row_id:
                # The same id must be the same attempt: else the file is another database's.
                if pending[1] != attempted_at:
                    raise ArchiveError(
                        f"{path} holds a send log {row_id} attempted at {pending[1]}, but the database's was"
                        f" attempted at {attempted_at}: the file belongs to another database; move it aside"
                    )
                continue  # the file's record is written when the next row passes it
            out.add(int(row_id))
            yield record + "\n"
    while pending is not None:
        out.add(pending[0])
        yield pending[2]
        pending = next(held, None)


def _tally(conn: psycopg.Connection[Any], table: sql.Composable, bounds: dict[str, Any]) -> Tally:
    row = conn.cursor(row_factory=tuple_row).execute(sql.SQL(_TALLY).format(table=table), bounds).fetchone()
    assert row is not None
    return Tally(int(row[0]), int(row[1]))


def archive_month(
    conn: psycopg.Connection[Any], directory: Path, table: str, month: date, *, drop: bool
) -> int:
    """Archive one month's rows of `table` (a partition of send_logs, or its default), then drop or delete them.

    `drop` drops the table itself (a month's partition); otherwise the month's rows are deleted
    from it (the default partition). Returns the rows that left the database.
    """
    path = send_log_path(directory, month)
    ident = sql.Identifier("mailroom", table)
    end = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    bounds = {"start": day_start(month), "end": day_start(end)}
    seen, out, stored = Tally(), Tally(), Tally()
    if _tally(conn, ident, bounds).rows or path.exists():  # an empty month leaves no empty file
        write_archive_atomically(path, _merged(conn, path, ident, bounds, seen, out))
        for row_id, _, _ in _file_records(path):  # read back: only what the file holds may leave the database
            stored.add(row_id)
        if stored != out:
            raise ArchiveError(f"{path} holds {stored.rows} send logs, {out.rows} were written")
    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '10s'")
        conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(ident))
        now = _tally(conn, ident, bounds)
        if now != seen:
            raise ArchiveError(
                f"{table}: {now.rows - seen.rows:+d} send logs of {month:%Y-%m} were written while it was"
                " archived; the next run archives them"
            )
        if drop:
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))
        else:
            conn.execute(sql.SQL(_DELETE).format(table=ident), bounds)
    return seen.rows
