"""The engine's clock: tests move it instead of sleeping through backoff, and leases ignore it."""

from __future__ import annotations

import time
from dataclasses import replace

import psycopg
from psycopg_pool import AsyncConnectionPool

from tests.worker.helpers import add_sender, enqueue_many, run_until_drained
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.engine import claim as claiming
from worker.engine import leases
from worker.engine.clock import MovedClock


async def test_retries_an_hour_apart_are_sent_in_seconds_when_the_clock_moves(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    # Real-world backoff: ten minutes, then up to an hour. Nobody sleeps through it.
    hourly = replace(settings, retry_base_seconds=600.0, retry_cap_seconds=3600.0)
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_rcpt("u0@example.com", "450 4.2.0 Mailbox busy", "451 4.3.0 Local error", "250 OK")
    enqueue_many(db_url, 1)
    started = time.monotonic()
    await run_until_drained(db_url, hourly, rounds=3)
    assert time.monotonic() - started < 60
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT status, retry_count FROM mailroom.email_queue").fetchone()
        outcomes = conn.execute("SELECT outcome FROM mailroom.send_logs ORDER BY attempt").fetchall()
    assert row == ("sent", 2)
    assert [o for (o,) in outcomes] == ["transient", "transient", "sent"]


async def test_a_retry_is_not_due_before_its_backoff_has_passed_on_the_clock(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    sender = add_sender(db_url, smtp_sink.port)
    [email] = enqueue_many(db_url, 1)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE mailroom.email_queue SET scheduled_for = now() + interval '10 minutes' WHERE id = %s",
            (email,),
        )
    clock = MovedClock()

    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        lease = claiming.Lease("t:1", 60, 5 * 86400, clock)
        assert (await claiming.take(pool, lease, sender, 10)).emails == []
        clock.advance(9 * 60)
        assert (await claiming.take(pool, lease, sender, 10)).emails == []
        clock.advance(2 * 60)
        assert [e.id for e in (await claiming.take(pool, lease, sender, 10)).emails] == [email]


async def test_moving_the_clock_rescues_no_live_lease(db_url: str, settings: Settings) -> None:
    sender = add_sender(db_url, 2525)  # never connected to: only claimed for
    enqueue_many(db_url, 1)
    clock = MovedClock()
    clock.advance(86400.0)

    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        claim = await claiming.take(pool, claiming.Lease("live:1", 60, 5 * 86400, clock), sender, 10)
        assert len(claim.emails) == 1
        # Leases are judged by the database's clock alone: a day ahead on ours takes nobody's claim.
        assert await leases.rescue_once(pool, 60) == []


async def test_a_soft_bounce_hold_ends_when_the_moved_clock_passes_its_day(db_url: str) -> None:
    sender = add_sender(db_url, 2525)  # never connected to: only claimed for
    [email] = enqueue_many(db_url, 1)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO mailroom.bounce_list (email, bounce_type, reason, bounce_count, first_bounced_at,"
            " last_bounced_at) SELECT recipient_email, 'soft', '452 4.2.2 mailbox full', 1,"
            " now() - interval '1 hour', now() - interval '1 hour' FROM mailroom.email_queue WHERE id = %s",
            (email,),
        )
    clock = MovedClock()

    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        lease = claiming.Lease("t:1", 60, 5 * 86400, clock)
        assert (await claiming.take(pool, lease, sender, 10)).emails == []  # held for the day
        # Two days on by the engine's clock the hold is over: the email is claimed, not held again
        # (which would leave a draining worker claiming the same held email forever).
        clock.advance(2 * 86400)
        assert [e.id for e in (await claiming.take(pool, lease, sender, 10)).emails] == [email]
