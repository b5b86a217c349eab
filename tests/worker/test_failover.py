"""PostgreSQL fails over under Mailroom (worker.core.failover): the pool and the LISTEN connection leave
a server that stopped taking writes, and in the drills nothing is lost or sent twice for a failover.

A PostgreSQL 15 primary with a synchronous standby (`tests.fixtures_failover`), a `mailroom worker`
process on the multi-host URL (`target_session_attrs=read-write`) delivering to a sink in this
process, a lease of a few seconds so that claims the failure cut off are rescued within the drill.
The primary either crashes (SIGKILL to its postmaster, its standby half a second behind: what it
acknowledged without waiting for the standby is lost) or is demoted and stays up (read-only, as a
node losing its leadership, behind a PgBouncer that the failover manager points at the new
primary), and the standby is promoted two seconds later. Every email must arrive;
an email sent again for the failover is at most the one message a connection had in flight; delivery
resumes within 30 s of the promotion, and an email enqueued afterwards arrives within 2 s (the
worker LISTENs on the new primary, not on the demoted one).

10,000 emails a drill, as the issue asks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from tests.fixtures_failover import Bouncer, Pair
from tests.worker.failover_drill import (
    CONCURRENCY,
    NEW_EMAIL_BOUND,
    RESUME_BOUND,
    Figures,
    crash,
    demote,
    promote,
    run_drill,
    worker_env,
)
from tests.worker.helpers import statuses
from worker.core.failover import DatabaseCircuit, Pool
from worker.core.listen import Listener, Waker
from worker.devtools.sink import RunningSink

EMAILS = 10_000


async def _pid(conn: psycopg.AsyncConnection[object]) -> int:
    return conn.info.backend_pid


async def _write_refused_as_read_only(pool: Pool, pids: list[int]) -> None:
    """A write that the server refuses as read-only with nothing reported first (PgBouncer passes no
    parameter on): the statement's 25006 is what tells."""
    async with pool.connection() as conn:
        pids.append(await _pid(conn))
        async with conn.transaction():
            await conn.execute("SET TRANSACTION READ ONLY")
            await conn.execute("INSERT INTO mailroom.workers (name) VALUES ('w')")


async def test_the_pool_never_lends_again_a_connection_whose_server_stopped_taking_writes(
    db_url: str,
) -> None:
    circuit = DatabaseCircuit("worker")
    pool = Pool(db_url, circuit=circuit, min_size=1, max_size=1, open=False, kwargs={"autocommit": True})
    async with pool:
        async with pool.connection() as conn:
            said_so = await _pid(conn)
            # What a demoted primary reports to every session after its reload (here: this session's own).
            await conn.execute("SET default_transaction_read_only = on")
        pids: list[int] = []
        with pytest.raises(errors.ReadOnlySqlTransaction):
            await _write_refused_as_read_only(pool, pids)
        refused = pids[0]
        assert refused != said_so  # the check closed the one that said so; the pool opened another
        assert circuit.failures == 1 and circuit.view().reason == "read-only"
        async with pool.connection() as conn:
            assert await _pid(conn) not in (said_so, refused)
            cur = await conn.execute("INSERT INTO mailroom.workers (name) VALUES ('w') RETURNING name")
            assert await cur.fetchone() == ("w",)
        assert circuit.failures == 0  # the database is back for this process


async def test_a_server_found_read_only_takes_the_pools_idle_connections_with_it(db_url: str) -> None:
    pool = Pool(
        db_url,
        circuit=DatabaseCircuit("worker"),
        min_size=3,
        max_size=3,
        open=False,
        kwargs={"autocommit": True},
    )
    async with pool:
        await pool.wait()
        async with pool.connection() as a, pool.connection() as b, pool.connection() as c:
            before = {await _pid(a), await _pid(b), await _pid(c)}
        # One of them meets the read-only server: the other two are on it too, and go without a check each.
        with pytest.raises(errors.ReadOnlySqlTransaction):
            await _write_refused_as_read_only(pool, [])
        async with pool.connection() as a, pool.connection() as b, pool.connection() as c:
            after = {await _pid(a), await _pid(b), await _pid(c)}
        assert not before & after


@pytest.mark.e2e  # a PostgreSQL pair
async def test_the_listener_leaves_a_demoted_primary_for_the_new_one_and_says_so(
    pg15_pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    waker = Waker()
    listener = Listener(pg15_pair.url(), ("mailroom_queue",), waker)
    ticket = waker.ticket()
    task = asyncio.create_task(listener.run())
    try:
        assert await waker.wait(10, ticket)  # every (re)connect wakes everyone
        pg15_pair.primary.demote()
        await asyncio.to_thread(pg15_pair.standby.promote)

        async def notify_on_the_new_primary() -> bool:
            ticket = waker.ticket()
            with psycopg.connect(pg15_pair.standby.owner_url, autocommit=True) as conn:
                conn.execute("NOTIFY mailroom_queue")
            return await waker.wait(2, ticket)

        # The first wake may be the reconnect's own; two in a row are the new primary's NOTIFYs.
        heard = [await notify_on_the_new_primary() for _ in range(8)]
        assert heard[-2:] == [True, True], heard
        assert listener.live
        assert "LISTEN connection's server turned read-only; reconnecting to the primary" in caplog.messages
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _check(figures: Figures, pair: Pair, log: Path) -> None:
    said = f"{figures}\n--- worker log ---\n{log.read_text()[-4000:]}"
    print(f"\n{figures}")  # the figures a run saw, for whoever runs it with -s
    assert figures.worker_exit is None, said  # it lived through the failover
    assert figures.distinct == EMAILS + 1, said  # nothing lost, the email after the drill included
    assert figures.most_from_one_connection <= 1, said
    assert figures.duplicates <= CONCURRENCY, said
    # Delivery resumed after the promotion, and an email enqueued afterwards arrived: liveness within
    # generous bounds, not a speed (tests assert no wall-clock figure; the figures are printed above).
    assert figures.resumed_seconds < RESUME_BOUND, said
    assert figures.new_email_seconds < NEW_EMAIL_BOUND, said
    assert statuses(pair.url()) == {"sent": EMAILS + 1}, said


@pytest.mark.e2e  # a PostgreSQL pair and a worker process
@pytest.mark.timeout(900)  # the drill's own bounds end it first (failover_drill)
def test_a_crashed_primary_loses_no_email_and_sends_none_twice(
    pg15_pair: Pair, smtp_sink: RunningSink, secret_key: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = worker_env(tmp_path / "home", secret_key, pg15_pair.url())
    figures = run_drill(pg15_pair, smtp_sink, env, log, crash, EMAILS)
    _check(figures, pg15_pair, log)


@pytest.mark.e2e  # a PostgreSQL pair, PgBouncer and a worker process
@pytest.mark.timeout(900)  # the drill's own bounds end it first (failover_drill)
def test_a_demoted_primary_behind_pgbouncer_loses_no_email_and_stops_no_worker(
    pg15_pair: Pair, pgbouncer: Bouncer, smtp_sink: RunningSink, secret_key: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    # The pool's connections through PgBouncer, which the failover manager points at the new primary;
    # LISTEN on a direct connection, over the multi-host URL.
    env = worker_env(
        tmp_path / "home",
        secret_key,
        pgbouncer.url,
        MAILROOM_LISTEN_DATABASE_URL=pg15_pair.url(),
        MAILROOM_TRANSACTION_POOLER="true",
    )

    def take_over(pair: Pair) -> None:
        promote(pair)
        pgbouncer.point_at(pair.standby)

    figures = run_drill(pg15_pair, smtp_sink, env, log, demote, EMAILS, take_over)
    _check(figures, pg15_pair, log)
