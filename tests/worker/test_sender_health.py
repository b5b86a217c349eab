"""What attempts do to their sender account (`worker.engine.sender_health`): a relay's faults open the
sender's circuit and charge no email, other senders carry the queue meanwhile, a probe the relay answers
closes the circuit."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from dataclasses import replace

import psycopg

from tests.worker.helpers import add_sender, circuit_state, enqueue_many, sender_row, statuses
from worker.core.config import Settings
from worker.devtools.sink import RunningSink, start_sink
from worker.engine.delivery import Worker, WorkerOptions


async def _eventually(check: Callable[[], bool], within: float = 20.0) -> None:
    """Wait until another component's rows say `check` (polled, with a deadline)."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def _emails(db_url: str) -> list[tuple[str, int]]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT status, retry_count FROM mailroom.email_queue ORDER BY id").fetchall()
    return [(str(s), int(n)) for s, n in rows]


def _health(db_url: str, settings: Settings) -> list[str]:
    from worker.ops.health import check_health

    with psycopg.connect(db_url) as conn:
        return check_health(conn, settings).reasons


async def test_a_relay_outage_charges_no_email_and_everything_goes_once_it_returns(
    db_url: str, fast: Settings, dead_port: int
) -> None:
    add_sender(db_url, dead_port)
    enqueue_many(db_url, 5, max_retries=1)  # one retry only: an outage must not use it up
    worker = Worker(db_url, fast, WorkerOptions(concurrency=2, poll_seconds=0.2))
    task = asyncio.create_task(worker.run())
    try:
        await _eventually(lambda: circuit_state(db_url) != "closed")
        # Several probes fail while the relay is down; still no email is charged.
        await _eventually(lambda: sender_row(db_url)["circuit_failures"] >= 3)
        assert set(_emails(db_url)) == {("pending", 0)}
        listed = sender_row(db_url)
        assert listed["status"] == "unreachable" and "connect" in listed["status_reason"]
        outage = _health(db_url, fast)
        assert any(r.startswith("sender primary is unreachable since") for r in outage), outage
        sink = start_sink("127.0.0.1", dead_port)
        try:
            await _eventually(lambda: statuses(db_url) == {"sent": 5})
            await _eventually(lambda: circuit_state(db_url) == "closed")
            assert _health(db_url, fast) == []  # healthy again once the relay is back
        finally:
            sink.stop()
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert {n for _, n in _emails(db_url)} == {0}


async def test_other_senders_deliver_the_queue_while_one_relay_is_down(
    db_url: str, fast: Settings, dead_port: int, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, dead_port, name="down")
    add_sender(db_url, smtp_sink.port, name="up")
    enqueue_many(db_url, 40)
    # Claims of 5: the slot that picks the down sender claims before the other has taken everything.
    worker = Worker(db_url, fast, WorkerOptions(concurrency=2, batch_size=5, drain=True, poll_seconds=0.2))
    await asyncio.wait_for(worker.run(), 60)
    assert statuses(db_url) == {"sent": 40}
    assert len(smtp_sink.messages) == 40
    assert sender_row(db_url, "down")["status"] == "unreachable"


async def test_a_stalled_relay_opens_its_circuit_within_the_timeout_and_frees_the_slots(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    with socket.socket() as silent:  # accepts connections, never greets
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        add_sender(db_url, silent.getsockname()[1], name="stalled")
        add_sender(db_url, smtp_sink.port, name="healthy")
        enqueue_many(db_url, 20)
        stalls = replace(fast, smtp_connect_timeout=1.0)  # the timeout this test waits out, once
        worker = Worker(
            db_url, stalls, WorkerOptions(concurrency=2, batch_size=5, drain=True, poll_seconds=0.2)
        )
        await asyncio.wait_for(worker.run(), 60)
    assert statuses(db_url) == {"sent": 20}
    stalled = sender_row(db_url, "stalled")
    assert stalled["status"] == "unreachable" and "Timeout" in stalled["status_reason"]


async def test_a_probe_the_relay_answers_closes_the_circuit_even_if_its_recipient_is_refused(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 3)
    smtp_sink.on_rcpt("u0@example.com", "550 5.1.1 User unknown")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "SELECT mailroom.open_circuit(id, 'connect: earlier outage', 60, 60) FROM mailroom.sender_accounts"
        )
        # Its backoff over: the next worker takes the probe (a drain finding no usable sender would just stop).
        conn.execute("UPDATE mailroom.sender_accounts SET circuit_retry_at = now() - interval '1 second'")
    worker = Worker(db_url, fast, WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2))
    await asyncio.wait_for(worker.run(), 30)
    assert circuit_state(db_url) == "closed"
    assert statuses(db_url) == {"failed": 1, "sent": 2}
