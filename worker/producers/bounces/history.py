"""Reading the history of bounces, complaints and other suppressions, however they arrived, newest first."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

# One history for every address, however each event arrived: the reports (DSN, ARF, webhooks), the
# relay's refusals during the SMTP session, unsubscribes, operators' changes and lifts
# (mailroom.suppression_events, written by triggers). A report keeps its DSN action and digest.
LIST = """
SELECT e.id, e.occurred_at AS received_at, e.kind, e.change, e.address AS recipient, e.status, b.action,
       e.reason AS diagnostic, e.source, e.email_id, e.campaign_id, s.name AS sender, b.digest_id, e.actor
FROM mailroom.suppression_events e
LEFT JOIN mailroom.bounce_events b ON b.id = e.bounce_event_id
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
    """The newest events of the suppression history, optionally of one kind, sender account or campaign."""
    params = {"limit": limit, "kind": kind, "sender": sender, "campaign": campaign}
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(LIST, params, prepare=False).fetchall()
