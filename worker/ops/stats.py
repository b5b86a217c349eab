"""Queue and sender figures for `mailroom stats`, health checks and the console's overview."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.reputation import DEFAULT_WINDOW, Reputation, sender_reputations
from worker.ops.senders import list_senders

STATUSES = ("unrendered", "pending", "assigned", "sent", "bounced", "failed", "cancelled", "suppressed")

COUNT_BY_STATUS = "SELECT status, count(*) AS n FROM mailroom.email_queue GROUP BY status"

# Served by the partial index over pending email only.
PENDING_DETAIL = """
SELECT count(*) FILTER (WHERE scheduled_for <= now() AND (next_retry_at IS NULL OR next_retry_at <= now()))
           AS due_now,
       count(*) FILTER (WHERE scheduled_for > now()) AS scheduled_later,
       count(*) FILTER (WHERE retry_count > 0) AS retrying,
       extract(epoch FROM now() - min(scheduled_for) FILTER (WHERE scheduled_for <= now()))::float
           AS oldest_pending_seconds
FROM mailroom.email_queue
WHERE status = 'pending'
"""


# Unsent email per message stream: waiting (unrendered or pending), due now, being sent.
BY_STREAM = """
SELECT stream,
       count(*) FILTER (WHERE status IN ('unrendered', 'pending')) AS waiting,
       count(*) FILTER (WHERE status = 'pending' AND scheduled_for <= now()) AS due_now,
       count(*) FILTER (WHERE status = 'assigned') AS sending
FROM mailroom.email_queue
WHERE status IN ('unrendered', 'pending', 'assigned')
GROUP BY stream ORDER BY stream
"""


def queue_stats(conn: psycopg.Connection[Any], *, reputation_window: int = DEFAULT_WINDOW) -> dict[str, Any]:
    """Counts per status, what is due now, the oldest pending age, and every sender account's day so far
    with its hard-bounce and complaint rates over its last `reputation_window` deliveries."""
    with conn.cursor(row_factory=dict_row) as cur:
        counts = {status: 0 for status in STATUSES}
        counts.update({row["status"]: int(row["n"]) for row in cur.execute(COUNT_BY_STATUS).fetchall()})
        detail = cur.execute(PENDING_DETAIL).fetchone() or {}
        streams = {row.pop("stream"): row for row in cur.execute(BY_STREAM).fetchall()}
    oldest = detail.get("oldest_pending_seconds")
    reputations = {r.sender: r for r in sender_reputations(conn, window=reputation_window)}
    senders = [
        {
            "name": s["name"],
            "status": s["status"],
            "status_reason": s["status_reason"],
            "unreachable_since": s["circuit_since"].isoformat() if s["circuit_since"] else None,
            "sent_today": s["sent_today"],
            "limit_today": s["effective_limit"],
            "bounces_today": s["bounces_today"],
            "errors_today": s["errors_today"],
            "last_used_at": s["last_used_at"].isoformat() if s["last_used_at"] else None,
            "streams": list(s["streams"]),
            **_reputation(reputations.get(s["name"])),
        }
        for s in list_senders(conn)
    ]
    return {
        "queue": counts,
        "due_now": int(detail.get("due_now") or 0),
        "scheduled_later": int(detail.get("scheduled_later") or 0),
        "retrying": int(detail.get("retrying") or 0),
        "oldest_pending_seconds": round(float(oldest), 3) if oldest is not None else None,
        "streams": streams,
        "senders": senders,
    }


def _reputation(r: Reputation | None) -> dict[str, Any]:
    """A sender's last deliveries and their hard-bounce and complaint rates (a sender added meanwhile: none)."""
    if r is None:
        return {
            "deliveries": 0,
            "hard_bounces": 0,
            "complaints": 0,
            "hard_bounce_rate": None,
            "complaint_rate": None,
        }
    view = r.as_dict()
    del view["sender"]
    return view
