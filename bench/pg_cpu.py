"""PostgreSQL CPU per delivered email, and delivery with two senders while one relay is down.

    python -m bench.pg_cpu [N] [CONCURRENCY]

The ceiling of scale-out is PostgreSQL's CPU per delivered email (every worker shares one server),
so this measures it: the CPU time of the server's processes (the postmaster, its live backends and
the backends that exited, from /proc) during a draining worker's run over N emails, divided by N.
Then the same run with two sender accounts, healthy, and again with one of them pointing at a port
where nothing listens: the circuit should set that sender aside and keep the rate near the healthy
one (goal: at least 0.8 of it). Needs the embedded server or MAILROOM_DATABASE_URL to a server on
this machine (its processes must be readable in /proc).
"""

from __future__ import annotations

import asyncio
import sys
import time

import psycopg

from bench.common import (
    add_bench_sender,
    bulk_enqueue,
    database,
    free_port,
    postmaster_pid,
    reset,
    server_cpu_seconds,
    sink_process,
)
from worker.core.config import Settings
from worker.core.crypto import generate_key
from worker.engine.delivery import Worker, WorkerOptions


def drain(url: str, concurrency: int) -> tuple[int, float]:
    """Run a draining worker; how many it sent and the wall time it took."""
    settings = Settings(database_url=url, secret_key=generate_key())  # signed Message-IDs, as deployed
    worker = Worker(url, settings, WorkerOptions(concurrency=concurrency, drain=True))
    started = time.perf_counter()
    asyncio.run(worker.run())
    return worker.sent, time.perf_counter() - started


def add_plain_sender(url: str, name: str, port: int) -> None:
    """Another sender account without a password, on `port` (a sink, or a port where nothing listens)."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security,"
            " daily_limit, max_connections) VALUES (%s, %s, '127.0.0.1', %s, 'none', 10000000, 64)",
            (name, f"{name}@example.org", port),
        )


def main() -> None:
    """Print PostgreSQL CPU per email, then healthy vs one-relay-down rates."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    with database() as url, sink_process() as (port, kind):
        print(f"{n} emails, {concurrency} connections, sink: {kind}", flush=True)
        postmaster = postmaster_pid(url)
        reset(url)
        add_bench_sender(url, port)
        bulk_enqueue(url, n)
        before = server_cpu_seconds(postmaster)
        sent, elapsed = drain(url, concurrency)
        used = server_cpu_seconds(postmaster) - before
        print(f"PostgreSQL CPU: {used:.2f} s for {sent} emails = {used / max(sent, 1) * 1e6:.0f} us per email"
              f" ({sent / elapsed:,.0f} emails/s)", flush=True)  # fmt: skip
        rates = {}
        for label, down in (("two healthy senders", False), ("one relay down", True)):
            reset(url)
            add_bench_sender(url, port)
            add_plain_sender(url, "second", free_port() if down else port)
            bulk_enqueue(url, n)
            sent, elapsed = drain(url, concurrency)
            rates[label] = sent / elapsed
            print(f"{label}: {sent} sent in {elapsed:.1f} s = {rates[label]:,.0f} emails/s", flush=True)
        ratio = rates["one relay down"] / rates["two healthy senders"]
        print(f"one relay down / healthy = {ratio:.2f} (goal >= 0.8)")


if __name__ == "__main__":
    main()
