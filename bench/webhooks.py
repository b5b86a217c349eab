"""Webhook delivery: `python -m bench.webhooks [EVENTS] [RATE]`.

Two figures, each against a receiver on loopback (aiohttp, in a process of its own as a real
receiver is, answering 204; it reports each arrival's CLOCK_MONOTONIC time, which every process of
the machine shares):

- **events per second**: EVENTS events written first (emails cancelled in one statement), then one
  worker started; from its start to the last POST received;
- **lag from commit to POST** while events are written at RATE a second (cancels of 10 emails per
  transaction, paced), the worker running: p50, p99 and max, from each transaction's commit to its
  event's arrival at the receiver. The goal is a p99 under 2 s at 1,000 events a second.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import psycopg
from aiohttp import web

from bench.common import database, reset
from worker.core.config import Settings
from worker.core.crypto import SecretBox, generate_key
from worker.engine.delivery import Worker, WorkerOptions
from worker.hooks import endpoints
from worker.hooks.producer import producer

PER_TRANSACTION = 10


@dataclass
class Arrivals:
    """What the receiver got: each email's event and when it arrived (monotonic clock), read from its pipe
    by a thread of this process."""

    at: dict[int, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def count(self) -> int:
        with self.lock:
            return len(self.at)

    def read(self, pipe: Connection) -> None:
        """Take the receiver's reports (email id, arrival time) until it ends."""
        while True:
            try:
                batch = pipe.recv()
            except EOFError:
                return
            with self.lock:
                for email_id, at in batch:
                    self.at.setdefault(email_id, at)


def serve(pipe: Connection) -> None:
    """The receiver process: send its URL, then each arrival, in batches, until killed."""

    arrived: list[tuple[int, float]] = []

    async def handle(request: web.Request) -> web.Response:
        event = json.loads(await request.read())
        arrived.append((int(event["data"]["email_id"]), time.monotonic()))
        return web.Response(status=204)

    async def report() -> None:
        while True:
            await asyncio.sleep(0.005)
            if arrived:
                batch = arrived[:]
                del arrived[: len(batch)]
                pipe.send(batch)

    async def run() -> None:
        app = web.Application()
        app.router.add_post("/hooks", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        pipe.send(f"http://127.0.0.1:{runner.addresses[0][1]}/hooks")
        await report()

    asyncio.run(run())


def start_receiver() -> tuple[Arrivals, multiprocessing.Process]:
    """The receiver's process, and the arrivals it reports."""
    ours, theirs = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.Process(target=serve, args=(theirs,), daemon=True)
    process.start()
    arrivals = Arrivals(url=ours.recv())
    threading.Thread(target=arrivals.read, args=(ours,), daemon=True).start()
    return arrivals, process


def enqueue_future(url: str, n: int) -> list[int]:
    """n pending emails due tomorrow (so no sender is needed), by COPY's neighbour: one INSERT ... SELECT."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, scheduled_for)"
            " SELECT 'u' || g || '@example.com', 'bench', 'x', now() + interval '1 day'"
            " FROM generate_series(1, %s) g RETURNING id",
            (n,),
        ).fetchall()
    return [int(r[0]) for r in rows]


async def until(arrivals: Arrivals, n: int, seconds: float = 600.0) -> None:
    """Wait (looking every 10 ms) until the receiver has n events."""
    deadline = time.monotonic() + seconds
    while arrivals.count() < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{arrivals.count()} of {n} events arrived")
        await asyncio.sleep(0.01)


async def throughput(url: str, settings: Settings, arrivals: Arrivals, n: int) -> float:
    """Events a second: n written before the worker starts, timed to the last arrival."""
    ids = enqueue_future(url, n)
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = ANY(%s)", (ids,))
    started = time.monotonic()
    worker = Worker(url, settings, WorkerOptions(concurrency=1, poll_seconds=3600), producers=[producer()])
    task = asyncio.create_task(worker.run())
    await until(arrivals, n)
    took = time.monotonic() - started
    worker.stop()
    await task
    return n / took


def write_paced(url: str, ids: list[int], rate: float, committed: dict[int, float]) -> None:
    """Cancel `ids`, PER_TRANSACTION a transaction, at `rate` a second; note each one's commit time."""
    interval = PER_TRANSACTION / rate
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        for k in range(0, len(ids), PER_TRANSACTION):
            batch = ids[k : k + PER_TRANSACTION]
            conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = ANY(%s)", (batch,))
            now = time.monotonic()
            committed.update(dict.fromkeys(batch, now))
            time.sleep(max(started + (k // PER_TRANSACTION + 1) * interval - time.monotonic(), 0))


async def lag(url: str, settings: Settings, arrivals: Arrivals, n: int, rate: float) -> list[float]:
    """Seconds from each transaction's commit to its event's arrival, events written at `rate` a second."""
    ids = enqueue_future(url, n)
    before = arrivals.count()
    worker = Worker(url, settings, WorkerOptions(concurrency=1, poll_seconds=3600), producers=[producer()])
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(1.0)  # started, listening, its dispatcher loaded
    committed: dict[int, float] = {}
    started = time.monotonic()
    # The application's writes come from elsewhere: a thread here, so the worker's loop never waits on them.
    await asyncio.to_thread(write_paced, url, ids, rate, committed)
    written = time.monotonic() - started
    await until(arrivals, before + n)
    worker.stop()
    await task
    print(f"  written at {n / written:,.0f} events/s")
    with arrivals.lock:
        return [arrivals.at[i] - committed[i] for i in ids]


def main() -> None:
    """Print events/s and the commit-to-POST lag."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 1000.0
    arrivals, receiver = start_receiver()
    key = generate_key()
    with database() as url:
        reset(url)
        settings = Settings(database_url=url, secret_key=key)
        with psycopg.connect(url) as conn:
            endpoints.add(
                conn,
                SecretBox(key),
                arrivals.url,
                ["email.cancelled"],
                role=None,
                allow_private=True,
                actor="bench",
            )
        per_second = asyncio.run(throughput(url, settings, arrivals, n))
        print(f"delivery: {n:,} events written first, {per_second:,.0f} events/s to one endpoint")
        lags = asyncio.run(lag(url, settings, arrivals, n, rate))
    receiver.kill()
    q = statistics.quantiles(lags, n=100)
    print(
        f"lag from commit to POST at {rate:,.0f} events/s ({n:,} events): p50 {q[49] * 1000:.0f} ms,"
        f" p99 {q[98] * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms (goal: p99 under 2,000 ms)"
    )


if __name__ == "__main__":
    main()
