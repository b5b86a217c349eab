"""What `mailroom health` warns of webhook endpoints: one failing for an hour or more, one disabled by its
receiver's 410 Gone, one paused with events waiting. None stops email; each means an application
misses events."""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row

FAILING_FOR_SECONDS = 3600.0

_ENDPOINTS = """
SELECT id, status, status_reason, failures, last_error,
       extract(epoch FROM now() - failing_since) AS failing_seconds,
       (SELECT count(*) FROM mailroom.webhook_deliveries d WHERE d.endpoint_id = p.id AND d.status = 'pending')
           AS pending
FROM mailroom.webhook_endpoints p
WHERE status IN ('disabled', 'paused')
   OR (status = 'active' AND failing_since < now() - make_interval(secs => %(after)s))
ORDER BY id
"""


class WebhookFinding(NamedTuple):
    """One warning: its kind, what is wrong, what to run."""

    kind: str
    text: str
    advice: str


def webhook_findings(conn: psycopg.Connection[Any]) -> list[WebhookFinding]:
    """A warning for each endpoint failing for an hour or more, and each one disabled."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_ENDPOINTS, {"after": FAILING_FOR_SECONDS}).fetchall()
    found = []
    for r in rows:
        if r["status"] == "paused":
            if r["pending"]:
                found.append(WebhookFinding(
                    "webhook_paused",
                    f"webhook endpoint {r['id']} is paused ({r['status_reason'] or 'no reason given'});"
                    f" {r['pending']} events wait (given up after MAILROOM_WEBHOOK_RETENTION_DAYS)",
                    f"mailroom webhooks resume {r['id']}",
                ))  # fmt: skip
        elif r["status"] == "disabled":
            found.append(WebhookFinding(
                "webhook_disabled",
                f"webhook endpoint {r['id']} is disabled ({r['status_reason']}); {r['pending']} events wait",
                f"mailroom webhooks resume {r['id']} once its receiver is back, or remove it",
            ))  # fmt: skip
        else:
            hours = float(r["failing_seconds"]) / 3600
            found.append(WebhookFinding(
                "webhook_failing",
                f"webhook endpoint {r['id']} has failed for {hours:.1f} h ({r['failures']} attempts in a row;"
                f" last: {r['last_error']}); {r['pending']} events wait",
                f"check its receiver; mailroom webhooks test {r['id']}",
            ))  # fmt: skip
    return found
