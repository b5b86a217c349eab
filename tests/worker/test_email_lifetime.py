"""An email's own lifetime (expires_at) and its cancel by the application that enqueued it, through the
Python API, the SQL function and a real worker, each as an application role."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import AsyncConnectionPool

from mailroom import EmailRequest, ValidationError, cancel, cancel_async, enqueue
from tests.fixtures_db import drop_roles, role_url
from tests.worker.helpers import add_sender
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.engine import leases
from worker.engine.claim import OWN_EXPIRED
from worker.engine.clock import MovedClock
from worker.engine.delivery import Worker, WorkerOptions
from worker.ops import roles

pytestmark = pytest.mark.usefixtures("role_lock")

SHOP, OTHER = "mr_life_shop", "mr_life_other"


@pytest.fixture
def apps(db_url: str) -> Iterator[tuple[str, str]]:
    with psycopg.connect(db_url) as conn:
        for role in (SHOP, OTHER):
            roles.grant(conn, "app", role, create=True, actor="tester")
    try:
        yield role_url(db_url, SHOP), role_url(db_url, OTHER)
    finally:
        drop_roles(db_url, SHOP, OTHER)


def _code(to: str, minutes: float, **more: object) -> EmailRequest:
    expires = datetime.now(UTC) + timedelta(minutes=minutes)
    return EmailRequest(to=to, subject="Your code", text="123456", expires_at=expires, **more)  # type: ignore[arg-type]


def _state(db_url: str, email_id: int) -> tuple[str, str | None, str | None]:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status, failure_kind, last_error FROM mailroom.email_queue WHERE id = %s", (email_id,)
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


async def _drain(db_url: str, settings: Settings, clock: MovedClock) -> int:
    worker = Worker(db_url, settings, WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2, clock=clock))
    await asyncio.wait_for(worker.run(), timeout=60)
    return worker.sent


async def test_an_email_past_its_own_lifetime_is_never_sent_and_ends_expired(
    db_url: str, apps: tuple[str, str], settings: Settings, smtp_sink: RunningSink
) -> None:
    shop, _ = apps
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(shop) as conn:
        late = enqueue(conn, _code("late@example.com", 10))
        fresh = enqueue(conn, _code("fresh@example.com", 60))
        plain = enqueue(conn, EmailRequest(to="plain@example.com", subject="Hi", text="x"))
    clock = MovedClock()
    clock.advance(20 * 60)  # twenty minutes on: the first code has expired, the second has not
    assert await _drain(db_url, settings, clock) == 2
    assert _state(db_url, late) == ("failed", "expired", OWN_EXPIRED)
    assert _state(db_url, fresh)[0] == _state(db_url, plain)[0] == "sent"
    assert sorted(m.rcpt_tos[0] for m in smtp_sink.messages) == ["fresh@example.com", "plain@example.com"]


async def test_the_sweep_expires_email_not_yet_due_and_email_still_unrendered(
    db_url: str, apps: tuple[str, str]
) -> None:
    shop, _ = apps
    soon = datetime.now(UTC) + timedelta(hours=2)
    with psycopg.connect(shop) as conn:
        # due in two hours (a retry's backoff, say), but worthless after thirty minutes
        later = enqueue(conn, _code("later@example.com", 30, scheduled_for=soon - timedelta(minutes=100)))
        (templated,) = conn.execute(
            "SELECT mailroom.enqueue(ARRAY['t@example.com'], template => 'activation',"
            ' template_data => \'{"name": "T", "activation_url": "https://x.example/a"}\','
            " expires_at => now() + interval '30 minutes')"
        ).fetchone()  # type: ignore[misc]
        kept = enqueue(conn, _code("kept@example.com", 240))
    assert _state(db_url, templated)[0] == "unrendered"
    clock = MovedClock()
    clock.advance(3600)
    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        assert await leases.expire_pending(pool, 5 * 86400, clock) == 2
    assert _state(db_url, later) == ("failed", "expired", OWN_EXPIRED)
    assert _state(db_url, templated) == ("failed", "expired", OWN_EXPIRED)
    assert _state(db_url, kept)[0] == "pending"


def test_a_lifetime_must_be_aware_and_after_the_email_is_due_at_every_door(
    db_url: str, apps: tuple[str, str]
) -> None:
    shop, _ = apps
    now = datetime.now(UTC)
    with psycopg.connect(shop) as conn:
        with pytest.raises(ValidationError, match="expires_at: must be a time zone-aware"):
            enqueue(
                conn, EmailRequest(to="a@example.com", subject="s", text="t", expires_at=datetime(2030, 1, 1))
            )
        with pytest.raises(ValidationError, match="expires_at: must be later than the email is due"):
            enqueue(
                conn,
                EmailRequest(
                    to="a@example.com",
                    subject="s",
                    text="t",
                    scheduled_for=now + timedelta(hours=2),
                    expires_at=now + timedelta(hours=1),
                ),
            )
        with pytest.raises(errors.InvalidParameterValue, match="expires_at: must be later"):
            conn.execute(
                "SELECT mailroom.enqueue(ARRAY['a@example.com'], 's', 't', expires_at => now() - interval '1 s')"
            )
        conn.rollback()
        # The Python API's door checks it too, for a caller that goes around `prepare`.
        with pytest.raises(errors.InvalidParameterValue, match="expires_at: must be later"):
            conn.execute(
                "SELECT * FROM mailroom.enqueue_rows(ARRAY['a@example.com'], ARRAY[NULL], ARRAY['s'], ARRAY['t'],"
                " ARRAY[NULL], ARRAY['{}'::jsonb], ARRAY[NULL], ARRAY[NULL], ARRAY[NULL::jsonb], ARRAY[0],"
                " ARRAY[NULL::timestamptz], ARRAY[5], ARRAY[NULL], ARRAY[NULL], ARRAY[true], ARRAY[NULL],"
                " ARRAY[NULL], ARRAY[NULL], ARRAY[NULL::uuid], ARRAY[NULL::uuid], ARRAY[false], ARRAY[false],"
                " ARRAY[NULL], ARRAY[NULL], ARRAY[NULL], ARRAY[NULL], ARRAY[NULL::jsonb],"
                " expires_at => ARRAY[now() - interval '1 minute'])"
            )
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM mailroom.email_queue").fetchone() == (0,)


def test_an_application_cancels_its_own_pending_email_by_id_or_key_and_nothing_else(
    db_url: str, apps: tuple[str, str]
) -> None:
    shop, other = apps
    with psycopg.connect(shop, autocommit=True) as conn:
        by_id = enqueue(conn, EmailRequest(to="a@example.com", subject="s", text="t"))
        by_key = enqueue(
            conn, EmailRequest(to="b@example.com", subject="s", text="t", idempotency_key="order-7")
        )
        busy = enqueue(conn, EmailRequest(to="c@example.com", subject="s", text="t"))
    with psycopg.connect(other, autocommit=True) as conn:
        theirs = enqueue(
            conn, EmailRequest(to="d@example.com", subject="s", text="t", idempotency_key="order-7")
        )
    with psycopg.connect(db_url) as conn:  # the worker has claimed this one: it may be on the wire
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'w:1', lease_token = gen_random_uuid(),"
            " lease_expires_at = now() + interval '5 minutes' WHERE id = %s",
            (busy,),
        )
    with psycopg.connect(shop) as conn:
        first = cancel(conn, by_id)
        assert first is not None and (first.id, first.status, first.cancelled) == (by_id, "cancelled", True)
        keyed = cancel(conn, idempotency_key="order-7")
        assert keyed is not None and (keyed.id, keyed.cancelled) == (by_key, True)
        again = cancel(conn, by_id)
        assert again is not None and (again.status, again.cancelled) == ("cancelled", False)
        sending = cancel(conn, busy)
        assert sending is not None and (sending.status, sending.cancelled) == ("assigned", False)
        assert cancel(conn, theirs) is None  # another role's email is not found
        with pytest.raises(TypeError, match="one of the two"):
            cancel(conn, by_id, idempotency_key="order-7")
    assert _state(db_url, theirs)[0] == "pending"
    assert _state(db_url, busy)[0] == "assigned"
    with psycopg.connect(shop) as conn:  # a rolled-back cancel cancels nothing
        enqueued = enqueue(conn, EmailRequest(to="e@example.com", subject="s", text="t"))
        conn.commit()
        assert cancel(conn, enqueued) is not None
        conn.rollback()
    assert _state(db_url, enqueued)[0] == "pending"

    async def from_async() -> None:
        async with await psycopg.AsyncConnection.connect(other, autocommit=True) as conn:
            done = await cancel_async(conn, idempotency_key="order-7")
            assert done is not None and (done.id, done.cancelled) == (theirs, True)

    asyncio.run(from_async())
    assert _state(db_url, theirs) == ("cancelled", None, "cancelled by the application that enqueued it")
