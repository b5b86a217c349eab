"""Operator actions on the queue: retry and cancel, each reporting what it changed and what it left alone.

Each call writes one audit row (`queue.retry`, `queue.cancel`) in the caller's transaction, with the
number of emails it changed; `actor` names who asked (default: the OS user).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from worker.core.results import ActionResult
from worker.ops import audit

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


def _apply(
    conn: psycopg.Connection[Any], statement: str, ids: Sequence[int], action: str, actor: str | None
) -> ActionResult:
    # Plain ints: `mailroom.enqueue` answers an int subclass, and psycopg refuses a list of mixed types.
    wanted = sorted({int(i) for i in ids})
    with conn.cursor(row_factory=tuple_row) as cur:
        changed = sorted(int(r[0]) for r in cur.execute(statement, (wanted,)).fetchall())
        rest = [i for i in wanted if i not in set(changed)]
        statuses = {int(r[0]): str(r[1]) for r in cur.execute(STATUS_OF, (rest,)).fetchall()} if rest else {}
    skipped = {i: (f"is {statuses[i]}" if i in statuses else "no such email") for i in rest}
    detail = {"requested": len(wanted), "skipped": len(skipped), **audit.id_detail(changed)}
    audit.record(conn, action, actor or audit.cli_actor(), _target(wanted), len(changed), detail)
    return ActionResult(changed=changed, skipped=skipped)


def _target(ids: list[int]) -> str:
    """The emails an operator named, short enough to read in a list of audit rows."""
    if len(ids) <= 5:
        return ("email " if len(ids) == 1 else "emails ") + ", ".join(map(str, ids))
    return f"{len(ids)} emails ({ids[0]}..{ids[-1]})"


def retry(conn: psycopg.Connection[Any], ids: Sequence[int], *, actor: str | None = None) -> ActionResult:
    """Send failed (or suppressed) emails again from a fresh retry budget."""
    return _apply(conn, RETRY, ids, "queue.retry", actor)


def retry_all_failed(conn: psycopg.Connection[Any], *, actor: str | None = None) -> ActionResult:
    """Return every failed email to the queue."""
    with conn.cursor(row_factory=tuple_row) as cur:
        changed = sorted(int(r[0]) for r in cur.execute(RETRY_ALL_FAILED).fetchall())
    detail = {"all_failed": True, **audit.id_detail(changed)}
    audit.record(conn, "queue.retry", actor or audit.cli_actor(), "every failed email", len(changed), detail)
    return ActionResult(changed=changed, skipped={})


def cancel(conn: psycopg.Connection[Any], ids: Sequence[int], *, actor: str | None = None) -> ActionResult:
    """Cancel emails that are not in flight or finished; assigned, sent and cancelled ones are left alone."""
    return _apply(conn, CANCEL, ids, "queue.cancel", actor)
