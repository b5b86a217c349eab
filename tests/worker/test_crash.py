"""Nothing is lost when a worker is killed at any instant or PostgreSQL restarts under it."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.fixtures_db import restart_embedded_server
from tests.worker.helpers import add_sender, statuses
from worker.core.config import Settings
from worker.devtools.sink import RunningSink, Stall

pytestmark = pytest.mark.e2e  # it starts worker processes and kills them

CONCURRENCY = 4


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    script = Path(sys.executable).with_name("mailroom")
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(script), "worker", "--concurrency", str(CONCURRENCY), "--batch-size", "20", "--drain"],
            env=env,
            stdout=out,
            stderr=out,
        )


def _bulk_enqueue(db_url: str, n: int) -> None:
    statement = "COPY mailroom.email_queue (recipient_email, subject, text_body) FROM STDIN"
    with psycopg.connect(db_url) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
        for i in range(n):
            copy.write_row((f"r{i}@example.com", f"Crash test {i}", "body"))


def test_kill_minus_nine_at_random_moments_loses_nothing(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink, tmp_path: Path
) -> None:
    add_sender(db_url, smtp_sink.port)
    total = 2000
    _bulk_enqueue(db_url, total)
    env = {**cli_env, "MAILROOM_LEASE_SECONDS": "1", "MAILROOM_RETRY_BASE_SECONDS": "0.01"}
    log = tmp_path / "worker.log"
    rng = random.Random(20261121)
    kills = 0
    for _ in range(4):
        proc = _start_worker(env, log)
        # Kill once some mail is flowing, at a random point of the run.
        target = len(smtp_sink.messages) + rng.randint(50, 300)
        smtp_sink.wait_for_sync(min(target, total), timeout=60)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=30)
    final = _start_worker(env, log)
    assert final.wait(timeout=120) == 0, log.read_text()[-3000:]

    assert statuses(db_url) == {"sent": total}
    received = [m.rcpt_tos[0] for m in smtp_sink.messages]
    assert set(received) == {f"r{i}@example.com" for i in range(total)}
    duplicates = len(received) - len(set(received))
    assert duplicates <= kills * CONCURRENCY
    with psycopg.connect(db_url) as conn:
        sent_logs = conn.execute("SELECT count(*) FROM mailroom.send_logs WHERE outcome = 'sent'").fetchone()
        nothing_assigned = conn.execute(
            "SELECT count(*) FROM mailroom.email_queue WHERE status = 'assigned'"
        ).fetchone()
        # What killed workers had journalled as sent was applied by lease rescue, not sent again.
        journal_left = conn.execute("SELECT count(*) FROM mailroom.sent_journal").fetchone()
    assert sent_logs is not None and sent_logs[0] >= total
    assert nothing_assigned == (0,)
    assert journal_left == (0,)


@pytest.mark.skipif(
    os.environ.get("MAILROOM_TEST_DATABASE_URL") is not None,
    reason="restarts the embedded server; an external one is not ours to restart",
)
async def test_worker_survives_a_postgresql_restart(
    db_url: str, pg_admin_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    from dataclasses import replace

    from tests.worker.helpers import enqueue_many
    from worker.engine.delivery import Worker, WorkerOptions

    fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05, lease_seconds=2.0)
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 50)
    worker = Worker(db_url, fast, WorkerOptions(concurrency=2, batch_size=5, poll_seconds=0.5))
    task = asyncio.create_task(worker.run())
    assert await smtp_sink.wait_for(10, timeout=30)
    await asyncio.to_thread(restart_embedded_server, pg_admin_url)
    enqueue_many(db_url, 50, start=50)
    deadline = asyncio.get_running_loop().time() + 60
    # The state to wait for lives in another component's database rows: poll it, with a deadline.
    while statuses(db_url).get("sent", 0) < 100 and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    worker.stop()
    await task
    assert statuses(db_url) == {"sent": 100}


def test_kill_minus_nine_mid_batch_with_a_daily_limit_still_delivers_everything_today(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink, tmp_path: Path
) -> None:
    # The limit is exactly the number of emails: quota a killed worker reserved and did not use must
    # come back when its lease is rescued, or the rest would wait for the next UTC day.
    total = 100
    add_sender(db_url, smtp_sink.port, daily_limit=total)
    smtp_sink.on_rcpt(lambda _: True, Stall(seconds=0.02))  # slow enough to be killed mid-batch
    _bulk_enqueue(db_url, total)
    env = {**cli_env, "MAILROOM_LEASE_SECONDS": "1", "MAILROOM_RETRY_BASE_SECONDS": "0.01"}
    log = tmp_path / "worker.log"
    proc = _start_worker(env, log)
    smtp_sink.wait_for_sync(10, timeout=60)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert len(smtp_sink.messages) < total // 2  # killed mid-batch, most of its claims unsent
    final = _start_worker(env, log)
    assert final.wait(timeout=120) == 0, log.read_text()[-3000:]

    assert statuses(db_url) == {"sent": total}
    received = [m.rcpt_tos[0] for m in smtp_sink.messages]
    assert len(set(received)) == total
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT sent FROM mailroom.sender_usage").fetchone()
        claims = conn.execute("SELECT count(*) FROM mailroom.claims").fetchone()
    # Charged once per email: a send the killed worker never recorded was refunded and charged again
    # when it was sent again, so the day's count is the number of emails, duplicates or not.
    assert row == (total,)
    assert claims == (0,)
