"""Whose fault is it: a bug of ours fails one email, a dead worker's quota comes back, old email expires,
and the worker never runs half-alive. (A relay's faults are the sender's: test_sender_health.)"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from tests.worker.helpers import BYPASS_RULES, add_sender, enqueue_many, refuse_writes, sender_row, statuses
from worker.core.config import Settings
from worker.devtools.sink import RunningSink, Stall
from worker.engine import claim as claiming
from worker.engine import leases
from worker.engine.delivery import Worker, WorkerOptions
from worker.engine.smtp import SmtpConnection
from worker.engine.supervision import Fatal, WorkerFailed, supervise


async def test_an_unexpected_exception_in_one_email_fails_that_email_only(
    db_url: str, fast: Settings, smtp_sink: RunningSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_send = SmtpConnection.send

    async def buggy_send(self: SmtpConnection, envelope: Any, upcoming: Any = None) -> Any:
        if envelope.recipient == "u2@example.com":
            raise KeyError("a bug of ours")  # not an SMTP or database error
        return await real_send(self, envelope, upcoming)

    monkeypatch.setattr(SmtpConnection, "send", buggy_send)
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 5)
    worker = Worker(db_url, fast, WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2))
    await asyncio.wait_for(worker.run(), 30)
    assert statuses(db_url) == {"sent": 4, "failed": 1}
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT recipient_email, last_error FROM mailroom.email_queue WHERE status = 'failed'"
        ).fetchone()
    assert row is not None and row[0] == "u2@example.com" and "internal error: KeyError" in row[1]


def test_email_past_the_queue_lifetime_fails_as_expired(db_url: str, smtp_sink: RunningSink) -> None:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, created_at)"
            " VALUES ('old@example.com', 'old', 'b', now() - interval '6 days'),"
            " ('older@example.com', 'old', 'b', now() - interval '7 days'),"
            " ('new@example.com', 'new', 'b', now())"
        )

    async def run() -> tuple[claiming.Claim, int]:
        from psycopg_pool import AsyncConnectionPool

        async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
            await pool.open()
            swept = await leases.expire_pending(pool, 5 * 86400)
            return await claiming.take(pool, claiming.Lease("t:1", 60, 5 * 86400), 1, 10), swept

    # The sweep fails one, a claim would fail the other the same way; the new one is claimed.
    claim, swept = asyncio.run(run())
    assert swept == 2 and [e.recipient_email for e in claim.emails] == ["new@example.com"]
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT status, last_error FROM mailroom.email_queue WHERE subject = 'old'"
        ).fetchall()
    assert {r[0] for r in rows} == {"failed"} and all(r[1].startswith("expired") for r in rows)


async def test_a_dead_workers_claim_gives_back_the_quota_it_did_not_use(
    db_url: str, smtp_sink: RunningSink
) -> None:
    from psycopg_pool import AsyncConnectionPool

    sender = add_sender(db_url, smtp_sink.port, daily_limit=10)
    ids = enqueue_many(db_url, 10)
    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        claim = await claiming.take(pool, claiming.Lease("dead:1", 60), sender, 10)
        assert claim.reserved == 10 and sender_row(db_url)["sent_today"] == 10
        with psycopg.connect(db_url, autocommit=True) as conn:
            # Three were sent and journalled before the worker died; nothing else was recorded.
            for email_id in ids[:3]:
                conn.execute(
                    "INSERT INTO mailroom.sent_journal (email_id, lease_token, sender_account_id, response,"
                    " duration_ms, worker) VALUES (%s, %s, %s, '250 ok', 1, 'dead:1')",
                    (email_id, claim.token, sender),
                )
            conn.execute("UPDATE mailroom.claims SET expires_at = now() - interval '1 second'")
        assert len(await leases.rescue_once(pool, 60)) == 7
    assert statuses(db_url) == {"sent": 3, "pending": 7}
    listed = sender_row(db_url)
    assert listed["sent_today"] == 3 and listed["status"] == "active"  # usable again today
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM mailroom.claims").fetchone() == (0,)


async def test_leases_that_cannot_be_renewed_stop_the_worker_with_the_reason(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_rcpt("u0@example.com", Stall(seconds=3), "250 OK")
    enqueue_many(db_url, 1)
    with psycopg.connect(db_url, autocommit=True) as conn:
        refuse_writes(conn, "claims", "UPDATE", message="renewal refused by test")
    settings = replace(fast, lease_seconds=0.6, smtp_command_timeout=5.0)
    worker = Worker(db_url, settings, WorkerOptions(concurrency=1, poll_seconds=0.2, grace_seconds=0.5))
    with pytest.raises(WorkerFailed, match="lease renewal: leases not renewed"):
        await asyncio.wait_for(worker.run(), 30)


async def test_a_task_that_keeps_failing_is_fatal_and_one_that_recovers_is_restarted() -> None:
    reasons: list[str] = []
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise RuntimeError(f"failure {runs}")

    await supervise("flaky", flaky, reasons.append, first_delay=0.001)
    assert runs == 3 and reasons == []

    async def broken() -> None:
        raise RuntimeError("always")

    await supervise("broken", broken, reasons.append, max_failures=3, first_delay=0.001)

    async def fatal() -> None:
        raise Fatal("at once")

    await supervise("fatal", fatal, reasons.append)
    assert reasons == ["broken failed 3 times within 60s (last: always)", "fatal: at once"]


async def test_a_draining_worker_with_producers_ends_every_time(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    from worker.cli.wiring import worker_producers

    add_sender(db_url, smtp_sink.port)
    for round_ in range(5):
        enqueue_many(db_url, 3, start=3 * round_)
        worker = Worker(
            db_url,
            fast,
            WorkerOptions(concurrency=2, drain=True, poll_seconds=0.2),
            producers=worker_producers(),
        )
        await asyncio.wait_for(worker.run(), 30)
    assert statuses(db_url) == {"sent": 15}


async def test_drain_rescues_a_dead_workers_claim_even_with_no_usable_sender(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    from psycopg_pool import AsyncConnectionPool

    sender = add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 3)
    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        await claiming.take(pool, claiming.Lease("dead:1", 60), sender, 10)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE mailroom.claims SET expires_at = now() - interval '1 second'")
        conn.execute("UPDATE mailroom.sender_accounts SET status = 'suspended'")  # nothing can send
    worker = Worker(db_url, fast, WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2))
    await asyncio.wait_for(worker.run(), 30)
    assert statuses(db_url) == {"pending": 3}  # rescued, not left assigned under a dead lease
    assert sender_row(db_url)["sent_today"] == 0


async def test_a_journal_row_refused_for_its_data_fails_no_other_slot_and_the_send_is_still_recorded(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 12)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION mailroom.test_refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF NEW.email_id = {ids[5]} THEN RAISE EXCEPTION 'bad row' USING ERRCODE = 'check_violation';"
            " END IF; RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER test_refuse_one BEFORE INSERT ON mailroom.sent_journal"
            " FOR EACH ROW EXECUTE FUNCTION mailroom.test_refuse_one()"
        )
    worker = Worker(db_url, fast, WorkerOptions(concurrency=3, batch_size=2, drain=True, poll_seconds=0.2))
    await asyncio.wait_for(worker.run(), 60)  # no slot failed, the worker did not stop
    assert statuses(db_url) == {"sent": 12}
    assert len(smtp_sink.messages) == 12  # nothing sent twice
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT response FROM mailroom.send_logs WHERE email_id = %s", (ids[5],)
        ).fetchone()
    assert row is not None and row[0] == "(reply not storable: CheckViolation)"


def test_a_heartbeat_forgets_workers_silent_for_a_day(db_url: str) -> None:
    from worker.engine import queue_sql as q

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO mailroom.workers (name, seen_at) VALUES ('killed:1', now() - interval '2 days')"
        )
        conn.execute(
            "INSERT INTO mailroom.workers (name, seen_at) VALUES ('quiet:2', now() - interval '1 hour')"
        )
        conn.execute(q.HEARTBEAT, {"name": "alive:3"})
        names = [r[0] for r in conn.execute("SELECT name FROM mailroom.workers ORDER BY name").fetchall()]
    assert names == ["alive:3", "quiet:2"]


async def test_a_senders_own_timeout_wins_over_the_workers(
    db_url: str, settings: Settings, smtp_sink: RunningSink, cli_env: dict[str, str]
) -> None:
    from worker.cli.main import main

    args = ["senders", "add", "slowpoke", "--from", "noreply@example.org", "--host", "127.0.0.1",
            "--port", str(smtp_sink.port), "--security", "none", "--command-timeout", "0.3"]  # fmt: skip
    assert await asyncio.to_thread(main, args) == 0
    smtp_sink.on_rcpt("u0@example.com", Stall(seconds=5), "250 OK")
    enqueue_many(db_url, 1, max_retries=0)
    worker = Worker(
        db_url, settings, WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2)
    )  # 30 s default
    await asyncio.wait_for(worker.run(), 30)
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT status, last_error FROM mailroom.email_queue").fetchone()
    assert row is not None and row[0] == "failed" and "Timeout" in row[1]


async def test_a_database_error_while_claiming_strands_nothing(db_url: str, smtp_sink: RunningSink) -> None:
    from psycopg_pool import AsyncConnectionPool

    sender = add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 5)
    with psycopg.connect(db_url, autocommit=True) as conn:
        refuse_writes(conn, "claims", message="claim row refused by test")  # after the rows and the quota
    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        with pytest.raises(psycopg.errors.CheckViolation, match="claim row refused"):
            await claiming.take(pool, claiming.Lease("w:1", 60), sender, 10)
    # One transaction: the emails are still pending (not assigned until a lease expires) and no quota is used.
    assert statuses(db_url) == {"pending": 5}
    assert sender_row(db_url)["sent_today"] == 0


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        (
            "subject",
            "=?utf-8?q?Hi=0D=0ABcc:_victim@example.com?=",
            "encoded word decodes to control character",
        ),
        (
            "headers",
            '{"X-Note": "=?utf-8?q?a=0D=0AInjected:_1?="}',
            "encoded word decodes to control character",
        ),
        ("headers", '{"Bcc": "victim@example.com"}', "set by Mailroom and cannot be overridden"),
        ("headers", '{"Bad Name": "x"}', "not a valid header name"),
        ("headers", '{"X-Count": 3}', "a header value must be text"),
    ],
)
async def test_a_row_written_around_the_api_is_checked_again_and_failed_not_sent(
    db_url: str, fast: Settings, smtp_sink: RunningSink, column: str, value: str, reason: str
) -> None:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(BYPASS_RULES)
        conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, headers) VALUES"
            " ('hostile@example.com', %s, 'body', %s::jsonb), ('fine@example.com', 'Fine', 'body', '{}')",
            (value if column == "subject" else "Hi", value if column == "headers" else "{}"),
        )
    worker = Worker(db_url, fast, WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2))
    await asyncio.wait_for(worker.run(), 30)
    assert [m.rcpt_tos[0] for m in smtp_sink.messages] == ["fine@example.com"]
    assert not any(b"Injected" in m.content or b"Bcc:" in m.content for m in smtp_sink.messages)
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status, last_error FROM mailroom.email_queue WHERE recipient_email = 'hostile@example.com'"
        ).fetchone()
    assert row is not None and row[0] == "failed" and reason in row[1]
