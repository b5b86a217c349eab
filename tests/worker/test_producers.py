"""Producers run inside the worker: woken by NOTIFY on their channels, isolated from delivery's fate."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from tests.worker.helpers import add_sender, enqueue_many, statuses
from worker.cli.wiring import worker_producers
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.engine.delivery import Worker, WorkerOptions
from worker.engine.producer import Producer


async def test_a_producer_runs_again_on_notify_on_its_channel(db_url: str, settings: Settings) -> None:
    calls: list[int] = []
    called = asyncio.Condition()

    async def run_once(conn: psycopg.AsyncConnection[Any], _: Settings) -> int:
        await conn.execute("SELECT 1")
        async with called:
            calls.append(1)
            called.notify_all()
        return 0

    async def calls_reach(n: int) -> None:
        async with called:
            await asyncio.wait_for(called.wait_for(lambda: len(calls) >= n), timeout=10)

    # An hour-long interval: besides its first pass (made once the LISTEN connection is up), only
    # NOTIFYs can call it during this test, so each round counted after one proves that NOTIFY woke it.
    producer = Producer("probe", run_once, channels=("mailroom_test_probe",), interval_seconds=3600)
    worker = Worker(db_url, settings, WorkerOptions(concurrency=1), producers=[producer])
    task = asyncio.create_task(worker.run())
    try:
        await calls_reach(1)
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            for _ in range(3):
                before = len(calls)
                await conn.execute("NOTIFY mailroom_test_probe")
                await calls_reach(before + 1)
    finally:
        worker.stop()
        await task


async def test_a_failing_producer_does_not_stop_delivery(
    db_url: str, settings: Settings, smtp_sink: RunningSink, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(conn: psycopg.AsyncConnection[Any], _: Settings) -> int:
        raise RuntimeError("producer bug")

    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 3)
    worker = Worker(
        db_url, settings, WorkerOptions(concurrency=1, drain=True), producers=[Producer("broken", broken)]
    )
    await asyncio.wait_for(worker.run(), timeout=30)
    assert statuses(db_url) == {"sent": 3}
    assert "producer broken failed" in caplog.text


def test_the_cli_worker_runs_every_producer_and_the_engine_none_by_itself(settings: Settings) -> None:
    assert [p.name for p in worker_producers()] == [
        "renderer",
        "birthdays",
        "lifecycle",
        "retention",
        "complaint-digest",
        "webhooks",
    ]
    assert Worker("postgresql://unused", settings, WorkerOptions()).producers == []
