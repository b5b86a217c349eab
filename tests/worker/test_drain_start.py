"""What a short `worker --drain` (a cron job's) does at start: what it loads, and the producers' first rounds."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from tests.worker.helpers import add_sender, statuses
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.engine.delivery import Worker, WorkerOptions
from worker.engine.producer import Producer

ROOT = Path(__file__).resolve().parents[2]

# What a drain that finds nothing to send or make never needs: the SMTP client, email building and
# enqueueing (templates, links), the HTTP clients, tracing and metrics exporters.
NOT_LOADED = (
    "aiosmtplib",
    "aiohttp",
    "jinja2",
    "yarl",
    "opentelemetry",
    "prometheus_client",
    "worker.core.message",
    "worker.core.outbox",
    "worker.core.templates",
    "worker.core.links",
    "worker.core.dkim",
    "worker.engine.smtp",
    "worker.engine.execute",
    "worker.ops.retention",
    "worker.producers.bounces.parse",
)


def loaded_by(argv: list[str], env: dict[str, str]) -> set[str]:
    """The modules `mailroom ARGV` has loaded when it is done (in a process of its own)."""
    code = (
        "import sys; from console.cli import main; code = main(sys.argv[1:]); assert code == 0, code;"
        " print(sorted(sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True, env=env, cwd=ROOT
    )
    return set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))


def test_a_drain_of_an_empty_queue_loads_nothing_it_does_not_use(
    db_url: str, tmp_path: Path, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)  # a sender to read and claim for, nothing due for it
    env = {**os.environ, "MAILROOM_DATABASE_URL": db_url, "MAILROOM_HOME": str(tmp_path / "home")}
    loaded = loaded_by(["worker", "--drain", "--no-producers"], env)
    assert "worker.engine.delivery" in loaded  # it did run the worker
    assert sorted(m for m in loaded if m.startswith(NOT_LOADED)) == []
    # With the producers: the first drain of a database runs the retention job (never run before), in
    # a process of its own (worker.ops.maintenance_child), so the worker loads none of it either...
    loaded = loaded_by(["worker", "--drain"], env)
    assert "worker.producers.birthdays.scheduler" in loaded
    assert sorted(m for m in loaded if m.startswith(NOT_LOADED)) == []
    with psycopg.connect(db_url) as conn:
        ran = conn.execute("SELECT last_run_at FROM mailroom.jobs WHERE name = 'retention'").fetchone()
    assert ran is not None and ran[0] is not None
    # ... and the next, with that job not due, loads nothing more than it needs to look.
    loaded = loaded_by(["worker", "--drain"], env)
    assert "worker.producers.birthdays.scheduler" in loaded
    assert sorted(m for m in loaded if m.startswith(NOT_LOADED)) == []


async def test_a_drain_delivers_what_the_producers_first_round_makes_due(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    rounds: list[int] = []

    async def makes_one(conn: psycopg.AsyncConnection[Any], _: Settings) -> int:
        rounds.append(1)
        if len(rounds) > 1:
            return 0
        await conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body)"
            " VALUES ('made@example.com', 'Made', 'by a producer')"
        )
        return 1

    producer = Producer("maker", makes_one, interval_seconds=3600)
    worker = Worker(db_url, settings, WorkerOptions(concurrency=2, drain=True), producers=[producer])
    await asyncio.wait_for(worker.run(), timeout=30)
    assert statuses(db_url) == {"sent": 1}
    assert len(rounds) == 2  # the round that made it, then one that found nothing


async def test_a_producer_with_channels_starts_after_the_listen_and_runs_one_round(
    db_url: str, settings: Settings
) -> None:
    calls: list[int] = []

    async def counts(conn: psycopg.AsyncConnection[Any], _: Settings) -> int:
        await conn.execute("SELECT 1")
        calls.append(1)
        return 0

    # The listener's first connect wakes every producer with channels: before, that woke a producer
    # whose first round was done already, and the drain paid a second round of every producer.
    producer = Producer("probe", counts, channels=("mailroom_test_probe",), interval_seconds=3600)
    worker = Worker(db_url, settings, WorkerOptions(concurrency=2, drain=True), producers=[producer])
    await asyncio.wait_for(worker.run(), timeout=30)
    assert calls == [1]
    assert worker.listener.live
