"""Deleting rows past a cutoff a chunk at a time, each chunk in its own transaction: the retention steps'
one loop (inbox, bounce quarantine, DMARC reports, login sessions).

A chunk's transaction is short, so the application's writes and the worker's claims never queue
behind one huge DELETE, and a run killed half-way keeps what it deleted.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import tuple_row


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
