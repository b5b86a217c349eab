"""A sender's reputation as mailbox providers judge it: hard bounces and complaints among its last deliveries.

A delivery is an attempt that ended the email for the sender: accepted by the relay (`sent`) or refused
for its recipient at once (`bounced`). Among a sender's last `window` deliveries (1,000 by default),
the hard bounces are those refused at once and those a DSN or a webhook reported as hard later; the
complaints those a feedback loop or a webhook reported. Later reports find their delivery by email id
(bounce_events keep it after retention deleted the email), so an email counts once however many of its
recipients bounced or complained. Each sender is read backwards along its send-log index, and each of
its deliveries probes the bounce events by their email index: a bounded amount of work per sender.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings

DEFAULT_WINDOW = 1000

# Parameters: window (deliveries per sender), name (one sender, or NULL for all).
REPUTATION = """
SELECT s.id, s.name, r.deliveries, r.hard_bounces, r.complaints
FROM mailroom.sender_accounts s
CROSS JOIN LATERAL (
    SELECT count(*) AS deliveries,
           count(*) FILTER (
               WHERE d.outcome = 'bounced'
                  OR EXISTS (SELECT 1 FROM mailroom.bounce_events b
                             WHERE b.email_id = d.email_id AND b.kind = 'hard')) AS hard_bounces,
           count(*) FILTER (
               WHERE EXISTS (SELECT 1 FROM mailroom.bounce_events b
                             WHERE b.email_id = d.email_id AND b.kind = 'complaint')) AS complaints
    FROM (SELECT l.email_id, l.outcome FROM mailroom.send_logs l
          WHERE l.sender_account_id = s.id AND l.outcome IN ('sent', 'bounced')
          ORDER BY l.attempted_at DESC
          LIMIT %(window)s) d
) r
WHERE %(name)s::text IS NULL OR s.name = %(name)s
ORDER BY s.name
"""


@dataclass(frozen=True)
class Reputation:
    """One sender's last deliveries and how many of them bounced hard or drew a complaint."""

    sender: str
    deliveries: int
    hard_bounces: int
    complaints: int

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Reputation:
        """From a row of `REPUTATION`."""
        return cls(str(row["name"]), int(row["deliveries"]), int(row["hard_bounces"]), int(row["complaints"]))

    def over(self, settings: Settings) -> tuple[bool, bool]:
        """Whether the hard-bounce and the complaint rate pass `mailroom health`'s thresholds (with
        enough deliveries to say: fewer than `health_min_attempts` say nothing about a rate)."""
        if self.deliveries < settings.health_min_attempts:
            return False, False
        return (
            (self.hard_bounce_rate or 0.0) > settings.health_max_bounce_rate,
            (self.complaint_rate or 0.0) > settings.health_max_complaint_rate,
        )

    @property
    def hard_bounce_rate(self) -> float | None:
        """Hard bounces among the deliveries; None before the first delivery."""
        return round(self.hard_bounces / self.deliveries, 4) if self.deliveries else None

    @property
    def complaint_rate(self) -> float | None:
        """Complaints among the deliveries; None before the first delivery."""
        return round(self.complaints / self.deliveries, 5) if self.deliveries else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, rates included."""
        return {
            **asdict(self),
            "hard_bounce_rate": self.hard_bounce_rate,
            "complaint_rate": self.complaint_rate,
        }


def sender_reputations(
    conn: psycopg.Connection[Any], *, window: int = DEFAULT_WINDOW, name: str | None = None
) -> list[Reputation]:
    """Every sender's reputation over its last `window` deliveries (or only the sender `name`), by name."""
    if window < 1:
        raise ValueError("the reputation window is at least one delivery")
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(REPUTATION, {"window": window, "name": name}).fetchall()
    return [Reputation.from_row(r) for r in rows]
