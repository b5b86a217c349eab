"""Producer test helpers: placed orders, sent and finished email at chosen ages, archived ids."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.engine.claim import EXPIRED
from worker.ops.archive_files import read_archive


def placed(email: str = "ada@example.com", **extra: Any) -> dict[str, Any]:
    """An order-placed event for `email`, with `extra` fields over the defaults."""
    payload: dict[str, Any] = {
        "customer_email": email,
        "customer_name": "Ada Lovelace",
        "order_number": "A-1001",
        "items": [
            {"name": "Analytical Engine manual", "quantity": 2, "unit_price": "12.50"},
            {"name": "Punched cards", "quantity": 1, "unit_price": 1200},
        ],
        "total": "1225.00",
        "currency": "eur",
    }
    payload.update(extra)
    return payload


NOW = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)


def sent_email(
    conn: psycopg.Connection[Any], settings: Settings, sent_at: datetime, to: str = "a@example.com"
) -> int:
    """An email delivered at `sent_at`, committed."""
    email_id = enqueue(
        conn, EmailRequest(to=to, subject=f"Sent {sent_at:%F %T}", text="Hello"), settings=settings
    )
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 't', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 hour' WHERE id = %s",
        (email_id,),
    )
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'sent', sent_at = %s WHERE id = %s", (sent_at, email_id)
    )
    conn.commit()
    return email_id


def archived_ids(directory: Path) -> list[int]:
    """Every id in every archive file (with repeats, if any)."""
    return [i for path in sorted(directory.glob("emails-*.jsonl.gz")) for i, _ in read_archive(path)]


# Each state its own age, all different: a row just younger than its own age is older than some
# other state's, so it stays only if its own setting is the one applied.
AGES = {"sent": 90, "failed": 30, "expired": 20, "cancelled": 7, "suppressed": 5}


def finished_email(
    conn: psycopg.Connection[Any],
    settings: Settings,
    state: str,
    finished_at: datetime,
    to: str = "a@example.com",
    campaign: str | None = None,
) -> int:
    """An email that reached `state` at `finished_at` (the clock set in SQL), committed."""
    if state == "sent":
        email_id = sent_email(conn, settings, finished_at, to=to)
        conn.execute("UPDATE mailroom.email_queue SET campaign_id = %s WHERE id = %s", (campaign, email_id))
        conn.commit()
        return email_id
    request = EmailRequest(to=to, subject=f"{state} {finished_at:%F %T}", text="Hello", campaign_id=campaign)
    email_id = enqueue(conn, request, settings=settings)
    change = {
        "failed": "status = 'failed', last_error = %(bounce)s, error_details = '{\"outcome\": \"bounced\"}'",
        "expired": "status = 'failed', last_error = %(expired)s, failure_kind = 'expired'",
        "cancelled": "status = 'cancelled'",
        "suppressed": "status = 'suppressed', suppression_reason = 'unsubscribed'",
    }[state]
    params = {"id": email_id, "bounce": BOUNCE.format(to=to), "expired": EXPIRED, "at": finished_at}
    conn.execute(f"UPDATE mailroom.email_queue SET {change} WHERE id = %(id)s", params)  # noqa: S608 -- constant SQL
    conn.execute("UPDATE mailroom.email_queue SET finished_at = %(at)s WHERE id = %(id)s", params)
    conn.commit()
    return email_id


BOUNCE = "550 5.1.1 <{to}>: user unknown"
