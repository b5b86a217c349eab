"""The sent journal: group commit of accepted email, applied per batch, and what lease rescue does with it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from tests.worker.helpers import add_sender, enqueue_many, refuse_writes, run_until_drained, statuses
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.engine import queue_sql as q
from worker.engine.sent_journal import Sent, SentRecorder

DEAD = uuid.UUID("00000000-0000-0000-0000-00000000dead")
LIVE = uuid.UUID("00000000-0000-0000-0000-0000000011fe")


def _claim_as(conn: psycopg.Connection[Any], ids: list[int], token: uuid.UUID, expired: bool) -> None:
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'host:1', lease_token = %s,"
        " lease_expires_at = now() + CASE WHEN %s THEN interval '-1 second' ELSE interval '1 hour' END"
        " WHERE id = ANY(%s)",
        (token, expired, ids),
    )


def _journal(conn: psycopg.Connection[Any], ids: list[int], token: uuid.UUID, sender: int) -> list[int]:
    sent = [
        {
            "id": i,
            "token": str(token),
            "sender": sender,
            "code": 250,
            "enhanced": "2.0.0",
            "response": f"2.0.0 queued as Q{i}",
            "duration_ms": 3,
            "message_id": f"<{i}@test>",
        }
        for i in ids
    ]
    rows = conn.execute(q.JOURNAL_SENT, {"sent": json.dumps(sent), "owner": "host:1"}).fetchall()
    return sorted(int(r[0]) for r in rows)


@contextlib.asynccontextmanager
async def _running_recorder(db_url: str) -> AsyncIterator[SentRecorder]:
    """A sent-journal recorder writing to this test's database, its task running until the block ends."""

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(db_url, autocommit=True)

    recorder = SentRecorder(connect, "host:1", retry_seconds=5)
    task = asyncio.create_task(recorder.run())
    try:
        yield recorder
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _sender_id(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT id FROM mailroom.sender_accounts").fetchone()
    assert row is not None
    return int(row[0])


def test_rescue_makes_journalled_email_sent_and_the_rest_pending(db_url: str, smtp_sink: RunningSink) -> None:
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 3)
    with psycopg.connect(db_url, autocommit=True) as conn:
        sender = _sender_id(conn)
        _claim_as(conn, ids, DEAD, expired=True)
        # The dead worker had the first two accepted and journalled; the third was never sent.
        assert _journal(conn, ids[:2], DEAD, sender) == ids[:2]
        returned = [r[0] for r in conn.execute(q.RESCUE_EXPIRED).fetchall()]
        rows = conn.execute(
            "SELECT id, status, message_id, sent_at IS NOT NULL FROM mailroom.email_queue ORDER BY id"
        ).fetchall()
        logs = conn.execute(
            "SELECT email_id, attempt, outcome, smtp_code, response, worker FROM mailroom.send_logs ORDER BY email_id"
        ).fetchall()
        left = conn.execute("SELECT count(*) FROM mailroom.sent_journal").fetchone()
    assert returned == [ids[2]]
    assert rows == [
        (ids[0], "sent", f"<{ids[0]}@test>", True),
        (ids[1], "sent", f"<{ids[1]}@test>", True),
        (ids[2], "pending", None, False),
    ]
    assert logs == [(i, 1, "sent", 250, f"2.0.0 queued as Q{i}", "host:1") for i in ids[:2]]
    assert left == (0,)


def test_a_lost_claim_journals_nothing_and_never_overwrites_the_new_holder(
    db_url: str, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 2)
    with psycopg.connect(db_url, autocommit=True) as conn:
        sender = _sender_id(conn)
        _claim_as(conn, ids, LIVE, expired=False)  # another worker holds both emails now
        assert _journal(conn, ids, DEAD, sender) == []  # the old holder learns its lease is gone
        # A journal row the old holder wrote just before losing the claim is dropped on apply.
        conn.execute(
            "INSERT INTO mailroom.sent_journal (email_id, lease_token, sender_account_id, response, duration_ms,"
            " worker) VALUES (%s, %s, %s, 'late', 1, 'host:0')",
            (ids[0], DEAD, sender),
        )
        conn.execute(q.APPLY_SENT, (DEAD,))
        rows = conn.execute("SELECT status, lease_token FROM mailroom.email_queue ORDER BY id").fetchall()
        logs = conn.execute("SELECT count(*) FROM mailroom.send_logs").fetchone()
        left = conn.execute("SELECT count(*) FROM mailroom.sent_journal").fetchone()
    assert rows == [("assigned", LIVE), ("assigned", LIVE)]
    assert logs == (0,)
    assert left == (0,)


def test_orphaned_journal_rows_are_forgotten_only_when_old(db_url: str, smtp_sink: RunningSink) -> None:
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 2)
    with psycopg.connect(db_url, autocommit=True) as conn:
        sender = _sender_id(conn)
        _claim_as(conn, ids[:1], LIVE, expired=False)
        insert = (
            "INSERT INTO mailroom.sent_journal (email_id, lease_token, sender_account_id, response, duration_ms,"
            " worker, sent_at) VALUES (%s, %s, %s, 'ok', 1, 'host:1', now() - make_interval(secs => %s))"
        )
        conn.execute(insert, (ids[0], LIVE, sender, 3600))  # a live claim's row, however old: kept
        conn.execute(insert, (ids[1], DEAD, sender, 3600))  # nobody holds this email: forgotten
        conn.execute(insert, (ids[1], DEAD, sender, 1))  # recent: kept for now
        conn.execute(q.FORGET_ORPHANED_JOURNAL, {"age": 120})
        left = conn.execute(
            "SELECT email_id, lease_token FROM mailroom.sent_journal ORDER BY email_id"
        ).fetchall()
    assert left == [(ids[0], LIVE), (ids[1], DEAD)]


def test_release_keeps_journalled_email_assigned(db_url: str, smtp_sink: RunningSink) -> None:
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 2)
    with psycopg.connect(db_url, autocommit=True) as conn:
        sender = _sender_id(conn)
        _claim_as(conn, ids, LIVE, expired=False)
        _journal(conn, ids[:1], LIVE, sender)
        conn.execute(q.RELEASE, {"ids": ids, "token": LIVE})
    assert statuses(db_url) == {"assigned": 1, "pending": 1}


async def test_slots_waiting_together_share_one_commit(db_url: str, smtp_sink: RunningSink) -> None:
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 4)
    with psycopg.connect(db_url, autocommit=True) as conn:
        sender = _sender_id(conn)
        _claim_as(conn, ids[:3], LIVE, expired=False)
        _claim_as(conn, ids[3:], DEAD, expired=False)

    async with _running_recorder(db_url) as recorder:
        held = await asyncio.gather(
            *(recorder.record(Sent(i, LIVE, sender, 250, "2.0.0", "ok", 1, f"<{i}@test>")) for i in ids)
        )
    # Four slots handed in their email before the recorder ran: one statement and one commit for all,
    # and the one whose claim is not this token's learns it.
    assert recorder.statements == 1
    assert held == [True, True, True, False]


async def test_a_drained_run_leaves_the_journal_empty_and_every_attempt_logged(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 120)
    assert await run_until_drained(db_url, settings, concurrency=4) == 120
    with psycopg.connect(db_url) as conn:
        left = conn.execute("SELECT count(*) FROM mailroom.sent_journal").fetchone()
        logs = conn.execute(
            "SELECT count(*), count(DISTINCT email_id) FROM mailroom.send_logs WHERE outcome = 'sent'"
        ).fetchone()
    assert statuses(db_url) == {"sent": 120}
    assert left == (0,)
    assert logs == (120, 120)


def _claim_plan(conn: psycopg.Connection[Any], sender: int, settings: str | None) -> str:
    params = {
        "limit": 50,
        "owner": "host:1",
        "token": LIVE,
        "lease": 60,
        "sender": sender,
        "lifetime": 86400,
        "ahead": 0,
        "expired": "expired",
        "own_expired": "expired",
        "stream": "transactional",
        "domains": [],
    }
    with conn.transaction():
        if settings:
            conn.execute(settings)
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + q.CLAIM, params).fetchall())
    return plan


def test_a_claim_reads_the_claim_index_in_order_even_before_the_queue_is_analyzed(
    db_url: str, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url, autocommit=True) as conn:
        statement = "COPY mailroom.email_queue (recipient_email, subject, text_body) FROM STDIN"
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for i in range(20_000):
                copy.write_row((f"b{i}@example.com", f"Backlog {i}", "body"))
        sender = _sender_id(conn)
        # The claim index leads with the stream the claim asks for: even the planner's guesses walk it
        # in order (before revision 0013 they sorted the whole backlog on every claim)...
        guessed = _claim_plan(conn, sender, None)
        # ...and as the worker claims, it walks the claim index and stops at the batch size.
        plan = _claim_plan(conn, sender, q.CLAIM_IN_INDEX_ORDER)
    for found in (guessed, plan):
        assert "Sort" not in found
        assert "email_queue_claim_idx" in found


def _join_filter_removed(plan: dict[str, Any]) -> int:
    """Rows a plan's joins compared and threw away, over every node of an EXPLAIN (FORMAT JSON) plan."""
    removed = int(plan.get("Rows Removed by Join Filter", 0))
    return removed + sum(_join_filter_removed(child) for child in plan.get("Plans", ()))


def test_applying_a_claims_journal_meets_each_email_with_its_own_row_only(
    db_url: str, smtp_sink: RunningSink
) -> None:
    """Before revision 0017 the apply joined the claim's emails to the rows its DELETE ... RETURNING gave,
    which have no index: every assigned email (every claim in flight) was compared with every journal row
    of the claim, quadratic work that took a quarter of a second for a claim of 300 beside three others."""
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 200)
    tokens = [uuid.uuid4() for _ in range(4)]
    with psycopg.connect(db_url, autocommit=True) as conn:
        sender = _sender_id(conn)
        # Analyzed as the server mostly finds them: the journal empty (its rows applied) and no email of
        # the queue assigned (claims come and go between two analyses).
        conn.execute("ANALYZE mailroom.sent_journal")
        conn.execute("ANALYZE mailroom.email_queue")
        for k, token in enumerate(tokens):  # four claims of 50 in flight, as four slots hold them
            part = ids[k * 50 : (k + 1) * 50]
            _claim_as(conn, part, token, expired=False)
            assert _journal(conn, part, token, sender) == part
        definition = conn.execute(
            "SELECT prosrc, coalesce(proconfig, '{}') FROM pg_proc"
            " WHERE oid = 'mailroom.apply_sent_journal(uuid)'::regprocedure"
        ).fetchone()
        assert definition is not None
        statement = re.sub(r"(?<![\w.])token\b", "%(token)s", str(definition[0]))
        with conn.transaction():  # EXPLAIN ANALYZE runs the statement: undone below
            for setting in definition[1]:  # the function's own settings (SET ... in its definition)
                name, _, value = str(setting).partition("=")
                conn.execute("SELECT set_config(%s, %s, true)", (name, value))
            explained = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, {"token": tokens[0]})
            row = explained.fetchone()
            assert row is not None
            plan = row[0][0]["Plan"]
            raise psycopg.Rollback
        applied = conn.execute("SELECT mailroom.apply_sent_journal(%s)", (tokens[0],)).fetchone()
        assert applied is not None and applied[0] == 50
        sent = conn.execute(
            "SELECT count(*) FROM mailroom.email_queue WHERE id = ANY(%s) AND status = 'sent'", (ids[:50],)
        ).fetchone()
    assert _join_filter_removed(plan) < 50, plan  # linear: no email compared with another's row
    assert sent == (50,)


async def test_a_refused_journal_write_reaches_every_waiting_slot_as_that_error(
    db_url: str, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 2)
    with psycopg.connect(db_url, autocommit=True) as conn:
        sender = _sender_id(conn)
        _claim_as(conn, ids, LIVE, expired=False)
        refuse_writes(conn, "sent_journal", message="journal refused by test")

    async with _running_recorder(db_url) as recorder:
        outcomes = await asyncio.gather(
            *(recorder.record(Sent(i, LIVE, sender, 250, "2.0.0", "ok", 1, None)) for i in ids),
            return_exceptions=True,
        )
        # The recorder goes on: once the table takes rows again, the next write succeeds.
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER test_refuse_insert ON mailroom.sent_journal")
        again = await recorder.record(Sent(ids[0], LIVE, sender, 250, "2.0.0", "ok", 1, None))
    assert all(isinstance(o, psycopg.errors.CheckViolation) for o in outcomes)
    assert "journal refused by test" in str(outcomes[0])
    assert again is True


def test_a_journal_write_racing_a_lease_rescue_waits_for_it_and_journals_nothing(
    db_url: str, smtp_sink: RunningSink
) -> None:
    import threading
    import time

    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 1)
    with psycopg.connect(db_url, autocommit=True) as conn:
        sender = _sender_id(conn)
        _claim_as(conn, ids, LIVE, expired=True)  # a slow worker: alive, but its lease ran out
    result: list[list[int]] = []
    with psycopg.connect(db_url) as rescuer, psycopg.connect(db_url, autocommit=True) as recorder:
        assert len(rescuer.execute(q.RESCUE_EXPIRED).fetchall()) == 1  # under way, not committed
        writer = threading.Thread(target=lambda: result.append(_journal(recorder, ids, LIVE, sender)))
        writer.start()
        # The journal write waits on the rescue's row lock (seen in pg_stat_activity), not on a timer.
        deadline = time.monotonic() + 10
        with psycopg.connect(db_url, autocommit=True) as watcher:
            while time.monotonic() < deadline:
                row = watcher.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                    (recorder.info.backend_pid,),
                ).fetchone()
                if row is not None and row[0] == "Lock":
                    break
            else:
                raise AssertionError("the journal write never waited for the rescue")
        rescuer.commit()
        writer.join(timeout=10)
    # The slow worker learns its lease is gone (and stops sending); nothing is left in the journal.
    assert result == [[]]
    assert statuses(db_url) == {"pending": 1}
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM mailroom.sent_journal").fetchone() == (0,)


def test_an_unknown_sqlstate_is_still_a_database_error() -> None:
    from worker.engine.sent_journal import _error_class

    assert _error_class("23514") is psycopg.errors.CheckViolation
    assert _error_class("ZZ999") is psycopg.DatabaseError
    assert _error_class("") is psycopg.OperationalError


async def test_the_journal_commits_as_the_server_says_unless_told_to_commit_asynchronously(
    db_url: str, settings: Settings
) -> None:
    from dataclasses import replace

    from worker.engine.delivery import Worker, WorkerOptions

    # What this database's operator chose (a synchronous standby's remote_apply, say): new sessions get it.
    with psycopg.connect(db_url, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = remote_apply')

    async def journal_commits(durable: bool) -> str:
        worker = Worker(db_url, replace(settings, journal_durable=durable), WorkerOptions())
        async with await worker._connect_for_recording() as conn:
            row = await (await conn.execute("SHOW synchronous_commit")).fetchone()
        assert row is not None
        return str(row[0])

    # Durable, what the relay accepted is on the standby before the next message goes out: a failover
    # then never makes the lease rescue send it again.
    assert await journal_commits(durable=True) == "remote_apply"
    assert await journal_commits(durable=False) == "off"
