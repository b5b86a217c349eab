"""What an operator action would do, counted before it is done: the figures a confirmation states.

Read-only: each function counts the rows the matching action in `worker.ops.actions` or
`worker.ops.senders` would change, and the consequences worth saying (email retried to an address that
the claim will suppress again; email left waiting when the last usable sender is suspended).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

# A retried email is pending again, and the claim suppresses it again when every recipient is
# suppressed: mailroom.email_suppression (schema.sql) says so by the one rule, mailroom.suppression_verdict.
RETRY_PREVIEW = """
SELECT count(*) AS changed,
       count(*) FILTER (WHERE mailroom.email_suppression('pending', q.recipient_email, q.to_extra, q.cc, q.bcc,
                                                         q.transactional) IS NOT NULL) AS suppressed
FROM mailroom.email_queue q
WHERE q.status IN ('failed', 'suppressed')
  AND (%(all)s AND q.status = 'failed' OR q.id = ANY(%(ids)s))
"""

CANCEL_PREVIEW = """
SELECT count(*) FILTER (WHERE status IN ('pending', 'failed', 'suppressed')) AS changed,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'assigned') AS in_flight
FROM mailroom.email_queue WHERE id = ANY(%(ids)s)
"""

SENDER_PREVIEW = """
SELECT s.status, s.daily_limit,
       (SELECT count(*) FROM mailroom.sender_accounts o
        WHERE o.id <> s.id AND o.status IN ('active', 'warming_up') AND o.circuit_state = 'closed') AS others,
       (SELECT count(*) FROM mailroom.email_queue
        WHERE status = 'pending' AND scheduled_for <= coalesce(%(now)s, now())) AS due
FROM mailroom.sender_accounts s WHERE s.name = %(name)s
"""


@dataclass(frozen=True)
class Preview:
    """How many rows an action would change, and the counts of its consequences."""

    changed: int
    suppressed: int = 0  # retried email the claim will suppress again
    pending: int = 0  # cancelled email that was still waiting to be sent
    in_flight: int = 0  # email a worker holds now: left alone
    others: int = 0  # other senders able to send
    due: int = 0  # email due now
    status: str = ""  # a sender's current status


def retry_preview(conn: psycopg.Connection[Any], ids: Sequence[int] | None) -> Preview:
    """What retrying these emails (None: every failed email) would do."""
    params = {"all": ids is None, "ids": list(ids or [])}
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(RETRY_PREVIEW, params).fetchone()
    assert row is not None
    return Preview(changed=int(row["changed"]), suppressed=int(row["suppressed"]))


def cancel_preview(conn: psycopg.Connection[Any], ids: Sequence[int]) -> Preview:
    """What cancelling these emails would do."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(CANCEL_PREVIEW, {"ids": list(ids)}).fetchone()
    assert row is not None
    return Preview(changed=int(row["changed"]), pending=int(row["pending"]), in_flight=int(row["in_flight"]))


def sender_preview(conn: psycopg.Connection[Any], name: str, *, now: datetime | None = None) -> Preview:
    """A sender's status, how many others can send, and how much email is due at `now` (default: the database's clock)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SENDER_PREVIEW, {"name": name, "now": now}).fetchone()
    if row is None:
        raise LookupError(f"no sender account named {name!r}")
    return Preview(changed=1, others=int(row["others"]), due=int(row["due"]), status=str(row["status"]))
