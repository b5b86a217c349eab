"""A worker that stood still past its lease sends nothing of its claim that another worker took meanwhile.

Leases are judged by the database: once a worker misses its renewals for a lease, another worker
rescues its claim and sends the emails again. A worker that was paused (a VM stopped, a swap storm,
an event loop starved on a loaded host) and then goes on sending its batch would send those emails
twice. These tests make the worker stand still on its steady clock while the relay holds its first
message, and have the database hand the claim's last email to someone else meanwhile.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import psycopg
from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.worker.helpers import add_sender, enqueue_many, statuses
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.devtools.sink_handler import SinkHandler
from worker.engine.clock import MovedClock
from worker.engine.delivery import Worker, WorkerOptions

LEASE = 60.0  # long: the periodic renewal never runs during a test, only the guard before each message


class _StandsStill(SinkHandler):
    """On the first message: the worker stands still for a whole lease, and meanwhile the claim's last
    email is taken from it (`taken` says how) -- what another worker's rescue does once the lease ran out."""

    def __init__(self, db_url: str, clock: MovedClock, taken: str) -> None:
        super().__init__()
        self.db_url, self.clock, self.taken = db_url, clock, taken
        self.stood_still = False

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if not self.stood_still:
            self.stood_still = True
            assert envelope.rcpt_tos == ["u0@example.com"]
            with psycopg.connect(self.db_url, autocommit=True) as conn:
                conn.execute(self.taken)
            self.clock.stand_still(LEASE)
        return await super().handle_DATA(server, session, envelope)


async def _drain(db_url: str, settings: Settings, clock: MovedClock) -> int:
    worker = Worker(
        db_url,
        replace(settings, lease_seconds=LEASE),
        WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2, clock=clock),
    )
    await asyncio.wait_for(worker.run(), timeout=60)
    return worker.sent


# The last email's lease handed to a worker that died at once: the draining worker rescues it after
# its batch and sends it then, once.
_HANDED_ON = """
UPDATE mailroom.email_queue SET lease_token = gen_random_uuid(), lease_owner = 'other:1', lease_expires_at = now()
WHERE recipient_email = 'u2@example.com'
"""


async def test_a_worker_that_stood_still_past_its_lease_leaves_what_was_taken_and_sends_the_rest(
    db_url: str, settings: Settings, smtp_sink_factory: Any
) -> None:
    clock = MovedClock()
    sink: RunningSink = smtp_sink_factory(handler=_StandsStill(db_url, clock, _HANDED_ON))
    add_sender(db_url, sink.port)
    enqueue_many(db_url, 3)  # one claim: u0, u1, u2
    assert await _drain(db_url, settings, clock) == 3
    # u1 was still held (the renewal before it said so) and went out; u2 only after its rescue.
    assert [m.rcpt_tos[0] for m in sink.messages] == ["u0@example.com", "u1@example.com", "u2@example.com"]
    assert statuses(db_url) == {"sent": 3}


async def test_a_worker_that_stood_still_but_still_holds_its_claim_renews_it_and_goes_on(
    db_url: str, settings: Settings, smtp_sink_factory: Any
) -> None:
    clock = MovedClock()
    # Nobody took anything: the lease ran out on the database's clock but was not rescued yet.
    expired = (
        "UPDATE mailroom.email_queue SET lease_expires_at = now() - interval '1s' WHERE status = 'assigned'"
    )
    sink: RunningSink = smtp_sink_factory(handler=_StandsStill(db_url, clock, expired))
    add_sender(db_url, sink.port)
    enqueue_many(db_url, 3)
    assert await _drain(db_url, settings, clock) == 3
    assert sorted(m.rcpt_tos[0] for m in sink.messages) == [f"u{i}@example.com" for i in range(3)]
    assert statuses(db_url) == {"sent": 3}


# Once, on the first wait for a paced sender's next send slot after its first (an UPDATE of its
# pacing row): the claim's u1 is handed to a worker that died at once, as a rescue during that wait would.
_HAND_U1_DURING_THE_WAIT = """
CREATE TABLE public.handed (done boolean);
CREATE FUNCTION public.hand_u1_on() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM public.handed) THEN
        INSERT INTO public.handed VALUES (true);
        UPDATE mailroom.email_queue
        SET lease_token = gen_random_uuid(), lease_owner = 'other:1', lease_expires_at = now()
        WHERE recipient_email = 'u1@example.com';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER hand_u1_on AFTER UPDATE ON mailroom.sender_pacing FOR EACH ROW EXECUTE FUNCTION public.hand_u1_on();
"""


async def test_a_paced_worker_that_stood_still_asks_after_its_wait_for_the_send_slot_not_before(
    db_url: str, settings: Settings, smtp_sink_factory: Any
) -> None:
    # The process stands still at u0 (its lease not known to hold any more); the email is taken from
    # it during the wait for the next send slot. Asked before that wait, the database would still say
    # "held", and u1 would go out from here and again after its rescue.
    clock = MovedClock()
    sink: RunningSink = smtp_sink_factory(handler=_StandsStill(db_url, clock, "SELECT 1"))
    add_sender(db_url, sink.port)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE mailroom.sender_accounts SET send_delay_ms = 1")
        conn.execute(_HAND_U1_DURING_THE_WAIT)
    enqueue_many(db_url, 3)
    assert await _drain(db_url, settings, clock) == 3
    assert sorted(m.rcpt_tos[0] for m in sink.messages) == [f"u{i}@example.com" for i in range(3)]
    assert statuses(db_url) == {"sent": 3}


async def test_a_renewal_that_finds_the_claim_rescued_does_not_make_its_lease_fresh(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    from psycopg_pool import AsyncConnectionPool

    from worker.engine import claim as claiming
    from worker.engine import leases
    from worker.engine.queue_sql import RESCUE_EXPIRED

    sender = add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 2)
    clock = MovedClock()
    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        held = leases.HeldLeases(LEASE, clock)
        since = clock.monotonic()
        claim = await claiming.take(pool, claiming.Lease("w:1", LEASE, clock=clock), sender, 10)  # type: ignore[arg-type]
        held.add(claim.token, since)
        # The process stood still past its lease, and another worker rescued the claim meanwhile.
        clock.stand_still(LEASE)
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("UPDATE mailroom.claims SET expires_at = now() - interval '1 second'")
            assert len(conn.execute(RESCUE_EXPIRED).fetchall()) == 2
        # The periodic renewal runs before the slot looks: it must not vouch for the rescued claim.
        await leases.renew_once(pool, held)  # type: ignore[arg-type]
        assert not held.fresh(claim.token)
        assert await leases.renew_claim(pool, held, claim.token) == set()  # type: ignore[arg-type]
        assert not held.fresh(claim.token)
    assert statuses(db_url) == {"pending": 2}
