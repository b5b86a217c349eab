"""Small helpers shared by the worker tests."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.fixtures_db import TEST_POSTAL_ADDRESS
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.outbox import EmailRequest, enqueue
from worker.engine.delivery import Worker, WorkerOptions
from worker.ops.senders import SenderSpec
from worker.ops.senders import add_sender as add_sender_account


def add_sender(
    db_url: str,
    port: int,
    *,
    daily_limit: int = 10_000,
    username: str | None = None,
    password: str | None = None,
    settings: Settings | None = None,
    name: str = "primary",
    max_connections: int = 4,
) -> int:
    """Add a sender account pointing at the local SMTP server."""
    key = settings.secret_key if settings and settings.secret_key else "x" * 43 + "="
    with psycopg.connect(db_url) as conn:
        return add_sender_account(
            conn,
            SenderSpec(
                name,
                "noreply@example.org",
                "127.0.0.1",
                port,
                "Mailroom",
                "none",
                username,
                daily_limit,
                max_connections=max_connections,
            ),
            password,
            SecretBox(key),
        )


def enqueue_many(
    db_url: str, n: int, *, start: int = 0, campaign_id: str | None = None, max_retries: int | None = None
) -> list[int]:
    """Enqueue n plain emails to u{start}..u{start+n-1}@example.com, committed."""
    # Campaign email needs a postal address, as the `settings` fixture's workers have.
    settings = Settings(database_url=db_url, postal_address=TEST_POSTAL_ADDRESS)
    with psycopg.connect(db_url) as conn:
        return [
            enqueue(
                conn,
                EmailRequest(
                    to=f"u{i}@example.com",
                    subject=f"Hello {i}",
                    text=f"Body {i}",
                    campaign_id=campaign_id,
                    max_retries=max_retries,
                ),
                settings=settings,
            )
            for i in range(start, start + n)
        ]


def statuses(db_url: str) -> dict[str, int]:
    """Count emails per status."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT status, count(*) FROM mailroom.email_queue GROUP BY status").fetchall()
    return {str(s): int(n) for s, n in rows}


async def run_until_drained(
    db_url: str, settings: Settings, *, rounds: int = 1, concurrency: int = 1, smtp_timeout: float = 5.0
) -> int:
    """Run a draining worker; repeat `rounds` times, the engine's clock moved past the longest backoff
    between them so backed-off retries are due (nobody sleeps); return emails sent."""
    import asyncio
    from dataclasses import replace

    settings = replace(
        settings,
        smtp_connect_timeout=smtp_timeout,
        smtp_command_timeout=smtp_timeout,
        smtp_data_timeout=smtp_timeout,
    )
    from worker.engine.clock import MovedClock

    clock = MovedClock()
    sent = 0
    for round_ in range(rounds):
        if round_:
            clock.advance(settings.retry_cap_seconds)  # the longest backoff: every retry is due now
        worker = Worker(
            db_url,
            settings,
            WorkerOptions(concurrency=concurrency, drain=True, poll_seconds=0.2, clock=clock),
        )
        await asyncio.wait_for(worker.run(), timeout=60)
        sent += worker.sent
    return sent


def refuse_writes(
    conn: psycopg.Connection[Any], table: str, event: str = "INSERT", message: str = "refused by test"
) -> None:
    """Make every `event` on `mailroom.<table>` fail with a check violation carrying `message`."""
    conn.execute(
        "CREATE OR REPLACE FUNCTION mailroom.test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
        f" $$ BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = 'check_violation'; END $$"
    )
    conn.execute(
        f"CREATE TRIGGER test_refuse_{event.lower()} BEFORE {event} ON mailroom.{table} FOR EACH ROW"
        " EXECUTE FUNCTION mailroom.test_refuse()"
    )


# Rows that got past the database's content rules: written before revision 0006, or by a superuser
# who disabled the trigger. The worker must still refuse to put them on the wire.
BYPASS_RULES = (
    "ALTER TABLE mailroom.email_queue DISABLE TRIGGER email_queue_content_rules_insert;"
    " ALTER TABLE mailroom.email_queue DISABLE TRIGGER email_queue_content_rules_update"
)


def sender_row(db_url: str, name: str = "primary") -> dict[str, Any]:
    """The sender account as `mailroom senders list` shows it."""
    from worker.ops.senders import list_senders

    with psycopg.connect(db_url) as conn:
        return next(s for s in list_senders(conn) if s["name"] == name)


def circuit_state(db_url: str) -> str:
    """The (only) sender account's circuit state."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT circuit_state FROM mailroom.sender_accounts").fetchone()
    return str(row[0]) if row else ""
