"""Enqueue-to-250 latency with an idle worker: `python -m bench.latency [N]` prints p50 and p99.

One email at a time is committed, the worker (woken by NOTIFY) sends it, and the clock stops
when the local SMTP server has received it. Also prints the worker's RSS afterwards.
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import sys
import time

import psycopg

from bench.common import add_bench_sender, database, reset
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.devtools.sink import start_sink
from worker.engine.delivery import Worker, WorkerOptions


async def measure(url: str, n: int) -> list[float]:
    """Latencies in milliseconds for n emails, each enqueued after the previous one arrived."""
    sink = start_sink()
    try:
        reset(url)
        add_bench_sender(url, sink.port)
        settings = Settings(database_url=url)
        worker = Worker(url, settings, WorkerOptions(concurrency=1, batch_size=10, poll_seconds=3600))
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)  # let the worker start and LISTEN before the clock runs
        latencies: list[float] = []
        with psycopg.connect(url) as conn:
            for i in range(n):
                started = time.perf_counter()
                with conn.transaction():
                    enqueue(
                        conn,
                        EmailRequest(to=f"user{i}@example.com", subject=f"Latency {i}", text="x"),
                        settings=settings,
                    )
                await sink.wait_for(i + 1, timeout=10)
                latencies.append((time.perf_counter() - started) * 1000)
        worker.stop()
        await task
        return latencies
    finally:
        sink.stop()


def main() -> None:
    """Print p50, p99 and max latency."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    with database() as url:
        latencies = asyncio.run(measure(url, n))
    q = statistics.quantiles(latencies, n=100)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"enqueue->250 over {n} emails: p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, max {max(latencies):.1f} ms;"
        f" peak RSS {rss_mb:.0f} MB"
    )


if __name__ == "__main__":
    main()
