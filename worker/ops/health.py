"""Health of the queue: is email piling up, stalled, or not going out at all?

Three checks, each with a configurable threshold: the backlog (email due now, pending or being
sent) is larger than `health_max_pending`; the oldest due email has waited longer than
`health_max_oldest_pending_seconds`; nothing was sent for `health_max_idle_seconds` while email has
been due (or in a worker's hands) for longer than `health_idle_grace_seconds`. The grace keeps a quiet
queue from raising an alarm the moment a new email arrives: the worker gets that long to send it.
Every figure comes from indexes over the active sets and one probe of the sent-email index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings

_FIGURES = """
SELECT coalesce(%(now)s, now()) AS now,
       (SELECT count(*) FROM mailroom.email_queue
        WHERE status = 'pending' AND scheduled_for <= coalesce(%(now)s, now())) AS due,
       (SELECT count(*) FROM mailroom.email_queue WHERE status = 'assigned') AS assigned,
       (SELECT min(scheduled_for) FROM mailroom.email_queue
        WHERE status = 'pending' AND scheduled_for <= coalesce(%(now)s, now())) AS oldest_due,
       (SELECT max(sent_at) FROM mailroom.email_queue WHERE status = 'sent') AS last_sent_at,
       EXISTS (SELECT 1 FROM mailroom.email_queue
               WHERE status = 'pending'
                 AND scheduled_for <= coalesce(%(now)s, now()) - make_interval(secs => %(grace)s))
       OR EXISTS (SELECT 1 FROM mailroom.email_queue
                  WHERE status = 'assigned'
                    AND assigned_at <= coalesce(%(now)s, now()) - make_interval(secs => %(grace)s))
           AS waiting_past_grace
"""


@dataclass
class HealthReport:
    """The figures, the thresholds they were held to, and why the queue is unhealthy (empty when it is fine)."""

    pending: int
    oldest_pending_seconds: float | None
    last_sent_at: datetime | None
    seconds_since_last_send: float | None
    thresholds: dict[str, float]
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No threshold was crossed."""
        return not self.reasons

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for `mailroom health --json`."""
        return {
            "ok": self.ok,
            "reasons": self.reasons,
            "pending": self.pending,
            "oldest_pending_seconds": self.oldest_pending_seconds,
            "last_sent_at": self.last_sent_at.isoformat() if self.last_sent_at else None,
            "seconds_since_last_send": self.seconds_since_last_send,
            "thresholds": self.thresholds,
        }


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def check_health(
    conn: psycopg.Connection[Any], settings: Settings, *, now: datetime | None = None
) -> HealthReport:
    """Measure the queue against the thresholds in `settings`; `now` defaults to the database's clock."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_FIGURES, {"now": now, "grace": settings.health_idle_grace_seconds}).fetchone()
    assert row is not None
    clock: datetime = row["now"]
    pending = int(row["due"]) + int(row["assigned"])
    oldest = (clock - row["oldest_due"]).total_seconds() if row["oldest_due"] else None
    last_sent: datetime | None = row["last_sent_at"]
    since_send = (clock - last_sent).total_seconds() if last_sent else None
    report = HealthReport(
        pending=pending,
        oldest_pending_seconds=round(oldest, 3) if oldest is not None else None,
        last_sent_at=last_sent,
        seconds_since_last_send=round(since_send, 3) if since_send is not None else None,
        thresholds={
            "max_pending": settings.health_max_pending,
            "max_oldest_pending_seconds": settings.health_max_oldest_pending_seconds,
            "max_idle_seconds": settings.health_max_idle_seconds,
            "idle_grace_seconds": settings.health_idle_grace_seconds,
        },
    )
    if pending > settings.health_max_pending:
        report.reasons.append(
            f"{pending} emails pending, more than the threshold of {settings.health_max_pending}"
            " (MAILROOM_HEALTH_MAX_PENDING)"
        )
    if oldest is not None and oldest > settings.health_max_oldest_pending_seconds:
        report.reasons.append(
            f"the oldest pending email has waited {_duration(oldest)}, longer than"
            f" {_duration(settings.health_max_oldest_pending_seconds)} (MAILROOM_HEALTH_MAX_OLDEST_PENDING_SECONDS);"
            " is a worker running?"
        )
    idle = since_send is None or since_send > settings.health_max_idle_seconds
    if pending and row["waiting_past_grace"] and idle:
        # After retention archived every sent email there is no sending time on record at all.
        when = "(no sent email on record)" if since_send is None else f"in {_duration(since_send)}"
        report.reasons.append(
            f"nothing was sent {when} while {pending} emails are pending, some for over"
            f" {_duration(settings.health_idle_grace_seconds)}"
            f" (MAILROOM_HEALTH_MAX_IDLE_SECONDS is {_duration(settings.health_max_idle_seconds)}); the worker may be down"
        )
    return report
