"""What became of birthday events: queued, completed, failed, missed or retrying, with the reason."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

# What `events list --status` may ask for: retrying is a pending event whose last attempt failed.
OUTCOME_FILTERS = ("queued", "failed", "missed", "retrying")

_COLUMNS = """
SELECT e.id AS event_id, e.person_id, p.email, p.first_name, p.last_name,
       CASE WHEN e.status = 'pending' AND e.retry_count > 0 THEN 'retrying' ELSE e.status END AS status,
       e.local_due_at, e.time_zone, e.retry_count, e.retry_at, e.failure_reason, e.email_id, e.updated_at
FROM mailroom.events e JOIN mailroom.people p ON p.id = e.person_id
"""

# The outcome index (0010/30) holds exactly these rows, newest change last: no scan of completed history.
RECENT = (
    _COLUMNS
    + """
WHERE (e.status IN ('queued', 'failed', 'missed') OR e.retry_count > 0)
  AND (%(status)s::text IS NULL
       OR (%(status)s = 'retrying' AND e.status = 'pending' AND e.retry_count > 0)
       OR e.status = %(status)s)
ORDER BY e.updated_at DESC, e.id
LIMIT %(limit)s
"""
)

# One person's events, every status (the person index).
OF_PERSON = (
    _COLUMNS
    + """
WHERE e.person_id = %(person)s
ORDER BY e.local_due_at DESC, e.id
LIMIT %(limit)s
"""
)


@dataclass(frozen=True)
class Outcome:
    """One birthday event as `mailroom events list` shows it."""

    event_id: uuid.UUID
    person_id: uuid.UUID
    email: str
    first_name: str
    last_name: str
    status: str  # pending, processing, queued, completed, failed, missed, cancelled, or retrying
    local_due_at: datetime
    time_zone: str
    retry_count: int
    retry_at: datetime | None
    failure_reason: str | None
    email_id: int | None
    updated_at: datetime


def event_outcomes(
    conn: psycopg.Connection[Any],
    *,
    status: str | None = None,
    person: uuid.UUID | None = None,
    limit: int = 100,
) -> list[Outcome]:
    """Events that are queued, failed, missed or retrying, newest change first (only `status` if given);
    with `person`, every event of that person, latest birthday first."""
    if status is not None and status not in OUTCOME_FILTERS:
        raise ValueError(f"status must be one of {', '.join(OUTCOME_FILTERS)}")
    query = OF_PERSON if person is not None else RECENT
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, {"status": status, "person": person, "limit": limit}).fetchall()
    return [Outcome(**row) for row in rows]
