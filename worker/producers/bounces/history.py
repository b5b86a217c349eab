"""Reading what the bounce intake recorded: the bounce and complaint events, newest first."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

LIST = """
SELECT e.id, e.received_at, e.kind, e.recipient, e.status, e.action, e.diagnostic, e.source, e.email_id,
       e.campaign_id, s.name AS sender, e.digest_id
FROM mailroom.bounce_events e
LEFT JOIN mailroom.sender_accounts s ON s.id = e.sender_account_id
WHERE (%(kind)s::text IS NULL OR e.kind = %(kind)s)
  AND (%(sender)s::text IS NULL OR s.name = %(sender)s)
  AND (%(campaign)s::text IS NULL OR e.campaign_id = %(campaign)s)
ORDER BY e.id DESC
LIMIT %(limit)s
"""


def list_events(
    conn: psycopg.Connection[Any],
    *,
    limit: int,
    kind: str | None = None,
    sender: str | None = None,
    campaign: str | None = None,
) -> list[dict[str, Any]]:
    """The newest bounce and complaint events, optionally of one kind, sender account or campaign."""
    params = {"limit": limit, "kind": kind, "sender": sender, "campaign": campaign}
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(LIST, params, prepare=False).fetchall()
