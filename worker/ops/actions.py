"""Operator actions on the queue: retry and cancel, each reporting what it changed and what it left alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from worker.core.results import ActionResult

RETRY = """
UPDATE mailroom.email_queue
SET status = 'pending', retry_count = 0, next_retry_at = NULL, scheduled_for = now()
WHERE id = ANY(%s) AND status IN ('failed', 'suppressed')
RETURNING id
"""

RETRY_ALL_FAILED = """
UPDATE mailroom.email_queue
SET status = 'pending', retry_count = 0, next_retry_at = NULL, scheduled_for = now()
WHERE status = 'failed'
RETURNING id
"""

CANCEL = """
UPDATE mailroom.email_queue
SET status = 'cancelled', next_retry_at = NULL
WHERE id = ANY(%s) AND status IN ('pending', 'failed', 'suppressed')
RETURNING id
"""

STATUS_OF = "SELECT id, status FROM mailroom.email_queue WHERE id = ANY(%s)"


def _apply(conn: psycopg.Connection[Any], statement: str, ids: Sequence[int], verb: str) -> ActionResult:
    wanted = sorted(set(ids))
    with conn.cursor(row_factory=tuple_row) as cur:
        changed = sorted(int(r[0]) for r in cur.execute(statement, (wanted,)).fetchall())
        rest = [i for i in wanted if i not in set(changed)]
        statuses = {int(r[0]): str(r[1]) for r in cur.execute(STATUS_OF, (rest,)).fetchall()} if rest else {}
    skipped = {i: (f"is {statuses[i]}" if i in statuses else "no such email") for i in rest}
    return ActionResult(changed=changed, skipped=skipped)


def retry(conn: psycopg.Connection[Any], ids: Sequence[int]) -> ActionResult:
    """Send failed (or suppressed) emails again from a fresh retry budget."""
    return _apply(conn, RETRY, ids, "retried")


def retry_all_failed(conn: psycopg.Connection[Any]) -> ActionResult:
    """Return every failed email to the queue."""
    with conn.cursor(row_factory=tuple_row) as cur:
        changed = sorted(int(r[0]) for r in cur.execute(RETRY_ALL_FAILED).fetchall())
    return ActionResult(changed=changed, skipped={})


def cancel(conn: psycopg.Connection[Any], ids: Sequence[int]) -> ActionResult:
    """Cancel emails that are not in flight or finished; assigned, sent and cancelled ones are left alone."""
    return _apply(conn, CANCEL, ids, "cancelled")
