"""An expired email is recorded as a state (`failure_kind`), not recognised from its last_error text."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.worker.helpers import add_sender, enqueue_many
from worker.core.config import Settings
from worker.engine import claim as claiming
from worker.engine import leases
from worker.ops.retention import run_maintenance


def _old_email(db_url: str, to: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, created_at)"
            " VALUES (%s, 'old', 'b', now() - interval '6 days')",
            (to,),
        )


def _kinds(db_url: str) -> dict[str, tuple[Any, ...]]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT recipient_email, status, failure_kind FROM mailroom.email_queue ORDER BY id"
        ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_the_sweep_and_the_claim_record_an_expired_email_as_expired(db_url: str) -> None:
    sender = add_sender(db_url, 2525)  # never connected to: only claimed for

    async def run() -> None:
        async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
            await pool.open()
            _old_email(db_url, "swept@example.com")
            assert await leases.expire_pending(pool, 5 * 86400) == 1
            # The sweep runs rarely: a claim fails what it finds past the queue lifetime the same way.
            _old_email(db_url, "claimed@example.com")
            claim = await claiming.take(pool, claiming.Lease("t:1", 60, 5 * 86400), sender, 10)
            assert claim.emails == [] and claim.seen == 1

    asyncio.run(run())
    assert _kinds(db_url) == {
        "swept@example.com": ("failed", "expired"),
        "claimed@example.com": ("failed", "expired"),
    }


def test_a_retried_expired_email_forgets_why_it_failed(db_url: str) -> None:
    _old_email(db_url, "old@example.com")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'failed', last_error = 'x', failure_kind = 'expired'"
        )
        conn.execute("UPDATE mailroom.email_queue SET status = 'pending'")
        with pytest.raises(psycopg.errors.CheckViolation, match="email_queue_failure_kind_only_when_failed"):
            conn.execute("UPDATE mailroom.email_queue SET failure_kind = 'expired'")
    assert set(_kinds(db_url).values()) == {("pending", None)}


def test_retention_tells_expired_from_failed_by_the_state_not_the_text(
    db_url: str, settings: Settings
) -> None:
    [expired, failed] = enqueue_many(db_url, 2)
    with psycopg.connect(db_url, autocommit=True) as conn:
        # The expired one's reason was reworded; the failed one's reads like the queue lifetime's.
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'failed', last_error = 'too old', failure_kind = 'expired'"
            " WHERE id = %s",
            (expired,),
        )
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'failed', last_error = %s, failure_kind = 'attempt'"
            " WHERE id = %s",
            (claiming.EXPIRED, failed),
        )
        conn.execute("UPDATE mailroom.email_queue SET finished_at = now() - interval '25 days'")
        now = conn.execute("SELECT now()").fetchone()
    assert now is not None
    aged = replace(settings, archive_failed_after_days=30, archive_expired_after_days=20)
    with psycopg.connect(db_url, autocommit=True) as conn:
        report = run_maintenance(conn, aged, now=now[0] + timedelta(seconds=1))
    assert not report.errors
    assert report.retention["expired"].deleted == 1 and report.retention["failed"].deleted == 0
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT id FROM mailroom.email_queue").fetchall() == [(failed,)]
