"""Webhook endpoints as operators list and steer them (the command line and the console): their
deliveries' state, pause, resume, remove, and replaying events again. Adding one (its URL checked,
its secret made) is `worker.hooks.endpoints`'s.

Every change is audited (`webhooks.*`) in the transaction that makes it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import dict_row

from worker.ops import audit

# Each endpoint with its deliveries waiting, given up, and delivered in the last day, each counted
# through an index of its own (an endpoint may have millions of deliveries over its retention). The
# URL is {url}: a read-only role may not read it (a receiver's URL is often its own secret).
_LIST = """
SELECT p.id, {url} AS url, p.owner_role, p.events, p.status, p.status_reason, p.allow_private, p.created_at,
       p.failures, p.failing_since, p.circuit_until, p.last_success_at, p.last_error,
       (SELECT count(*) FROM mailroom.webhook_deliveries d
        WHERE d.endpoint_id = p.id AND d.status = 'pending') AS pending,
       (SELECT count(*) FROM mailroom.webhook_deliveries d
        WHERE d.endpoint_id = p.id AND d.status = 'dead') AS dead,
       (SELECT count(*) FROM mailroom.webhook_deliveries d
        WHERE d.endpoint_id = p.id AND d.status = 'delivered' AND d.finished_at > now() - interval '1 day')
           AS delivered
FROM mailroom.webhook_endpoints p
ORDER BY p.id
"""
LIST = _LIST.format(url="p.url")
LIST_WITHOUT_URLS = _LIST.format(url="NULL::text")
CAN_READ_URLS = "SELECT has_column_privilege('mailroom.webhook_endpoints', 'url', 'SELECT')"


SET_STATUS = """
UPDATE mailroom.webhook_endpoints
SET status = %(status)s, status_reason = %(reason)s,
    failures = CASE WHEN %(status)s = 'active' THEN 0 ELSE failures END,
    circuit_until = CASE WHEN %(status)s = 'active' THEN NULL ELSE circuit_until END
WHERE id = %(id)s
RETURNING id
"""

# Deliveries again, with the same event ids: those that exist go back to pending, and events the
# endpoint wants that it never had (written before it was added) get a delivery.
REPLAY = """
WITH chosen AS (
    SELECT p.id AS endpoint_id, v.id AS event_id, v.email_id
    FROM mailroom.webhook_endpoints p
    JOIN mailroom.webhook_events v
      ON v.type = ANY (p.events) AND (p.owner_role IS NULL OR p.owner_role = v.owner)
    WHERE p.id = ANY (%(ids)s) AND v.occurred_at >= %(since)s
)
INSERT INTO mailroom.webhook_deliveries AS d (endpoint_id, event_id, email_id)
SELECT endpoint_id, event_id, email_id FROM chosen
ON CONFLICT (endpoint_id, event_id) DO UPDATE
SET status = 'pending', finished_at = NULL, next_attempt_at = now(), leased_until = NULL,
    attempts = 0, first_attempt_at = NULL
WHERE d.status <> 'pending'
RETURNING d.endpoint_id
"""


def endpoints(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Every endpoint with its deliveries' counts, oldest first (without URLs for a read-only role)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(CAN_READ_URLS).fetchone()
        readable = bool(row and next(iter(row.values())))
        return list(cur.execute(LIST if readable else LIST_WITHOUT_URLS).fetchall())


def set_status(
    conn: psycopg.Connection[Any], endpoint: int, status: str, *, reason: str | None, actor: str
) -> bool:
    """Pause or resume (a disabled endpoint too) one endpoint, audited; False when there is none."""
    row = conn.execute(SET_STATUS, {"id": endpoint, "status": status, "reason": reason}).fetchone()
    if row is None:
        return False
    action = "webhooks.resume" if status == "active" else "webhooks.pause"
    audit.record(conn, action, actor, f"webhook_endpoints:{endpoint}", 1, {"reason": reason})
    if status == "active":
        conn.execute("SELECT pg_notify('mailroom_webhooks', '')")
    return True


def remove(conn: psycopg.Connection[Any], endpoint: int, *, actor: str) -> bool:
    """Delete one endpoint and its deliveries, audited; False when there is none.

    In two transactions: first the endpoint is marked `removing`, which no event is fanned out to, and
    that commits; then it is deleted. A transaction writing events (the worker applying what it sent,
    the tracker recording an open) then never waits on the delete's lock, only to fail on the foreign
    key of a delivery to an endpoint gone meanwhile."""
    with conn.transaction():
        row = conn.execute(
            "UPDATE mailroom.webhook_endpoints SET status = 'removing' WHERE id = %s RETURNING url",
            (endpoint,),
        ).fetchone()
    if row is None:
        return False
    with conn.transaction():
        conn.execute("DELETE FROM mailroom.webhook_endpoints WHERE id = %s", (endpoint,))
        audit.record(
            conn, "webhooks.remove", actor, f"webhook_endpoints:{endpoint}", 1, {"url": where(_first(row))}
        )
    return True


def where(url: str) -> str:
    """What the audit log keeps of an endpoint's URL: its scheme and host (a path or query may be its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def replay(conn: psycopg.Connection[Any], endpoint_ids: list[int], since: datetime, *, actor: str) -> int:
    """Send the events since `since` again to these endpoints (same ids), audited; how many deliveries."""
    rows = conn.execute(REPLAY, {"ids": endpoint_ids, "since": since}).fetchall()
    detail = {"endpoints": endpoint_ids, "since": since.isoformat(), "deliveries": len(rows)}
    audit.record(conn, "webhooks.replay", actor, "webhook_deliveries", len(rows), detail)
    conn.execute("SELECT pg_notify('mailroom_webhooks', '')")
    return len(rows)


def known_ids(conn: psycopg.Connection[Any], wanted: list[int] | None) -> list[int]:
    """The endpoints named that exist (all of them when none is named)."""
    rows = conn.execute("SELECT id FROM mailroom.webhook_endpoints ORDER BY id").fetchall()
    ids = [int(_first(r)) for r in rows]
    return ids if wanted is None else [i for i in ids if i in wanted]


def _first(row: Any) -> Any:
    """The first column of a row, whichever row factory the connection has."""
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
