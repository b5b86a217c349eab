"""Drills: PostgreSQL fails over under a running worker, and nothing is lost or sent twice for it.

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

2,000 emails a drill (the issue measured with 3,000 and asks for 10,000): on the two shared, busy
cores of the test machine the crash drill then takes about 35 s and the demotion about 22 s, besides
the 10 to 15 s the pair takes to build once per test process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures_failover import Bouncer, Pair
from tests.worker.failover_drill import CONCURRENCY, Figures, crash, demote, promote, run_drill, worker_env
from tests.worker.helpers import statuses
from worker.devtools.sink import RunningSink

pytestmark = pytest.mark.e2e  # a PostgreSQL pair, PgBouncers and a worker process

EMAILS = 2000


def _check(figures: Figures, pair: Pair, log: Path) -> None:
    said = f"{figures}\n--- worker log ---\n{log.read_text()[-4000:]}"
    print(f"\n{figures}")  # the figures a run saw, for whoever runs it with -s
    assert figures.worker_exit is None, said  # it lived through the failover
    assert figures.distinct == EMAILS + 1, said  # nothing lost, the email after the drill included
    assert figures.most_from_one_connection <= 1, said
    assert figures.duplicates <= CONCURRENCY, said
    assert figures.resumed_seconds <= 30, said
    assert figures.new_email_seconds <= 2, said
    assert statuses(pair.url()) == {"sent": EMAILS + 1}, said


def test_a_crashed_primary_loses_no_email_and_sends_none_twice(
    pg15_pair: Pair, smtp_sink: RunningSink, secret_key: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = worker_env(tmp_path / "home", secret_key, pg15_pair.url())
    figures = run_drill(pg15_pair, smtp_sink, env, log, crash, EMAILS)
    _check(figures, pg15_pair, log)


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
