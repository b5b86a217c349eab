"""End-to-end delivery throughput against an SMTP sink on loopback, with the raw ceiling and a naive baseline.

    python -m bench.throughput [N] [CONCURRENCY]

(a) raw ceiling: aiosmtplib sending pre-built bytes over CONCURRENCY connections, no database;
(b) naive baseline: one email per transaction (claim one, build, send, update), as the references do it;
(c) Mailroom's worker, one process with CONCURRENCY connections, draining N emails;
(d) `mailroom worker --processes P` with one process per CPU core and CONCURRENCY connections in all;
(e) Mailroom's own SMTP path (one round trip a message) with no database, for what recording costs.
Every run uses the same sink. The worker's rates are sent emails over the span from the first attempt
to the last in send_logs (process start-up is not delivery).
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

import aiosmtplib
import psycopg
from psycopg.rows import dict_row

from bench.common import add_bench_sender, bulk_enqueue, database, reset, sink_process
from worker.core.config import Settings
from worker.core.crypto import generate_key
from worker.core.message import Envelope, build_message
from worker.engine.delivery import Worker, WorkerOptions
from worker.engine.smtp import SmtpAccount, SmtpConnection


def _bench_content() -> bytes:
    row = {
        "id": 1,
        "created_at": datetime.now(UTC),
        "recipient_email": "user@example.com",
        "recipient_name": None,
        "subject": "Benchmark message",
        "text_body": "Hello from the benchmark.\n",
        "html_body": None,
        "headers": {},
    }
    return build_message(row, "bench@example.org").content


async def raw_ceiling(port: int, n: int, concurrency: int) -> float:
    """Messages/s sending the same pre-built bytes with no database at all."""
    content = _bench_content()

    async def one_connection(count: int) -> None:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, start_tls=False)
        await client.connect()
        for _ in range(count):
            await client.sendmail("bench@example.org", ["user@example.com"], content)
        await client.quit()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection(n // concurrency) for _ in range(concurrency)))
    return (n // concurrency * concurrency) / (time.perf_counter() - started)


async def pipelined_ceiling(port: int, n: int, concurrency: int) -> float:
    """Messages/s through Mailroom's own SMTP path (PIPELINING, each message's commands behind the
    previous body: one round trip a message) with pre-built bytes and no database: what the worker
    would do if recording cost nothing."""
    envelope = Envelope("bench@example.org", "user@example.com", "<bench@example.org>", _bench_content())

    async def one_connection(count: int) -> None:
        connection = SmtpConnection(SmtpAccount(0, "127.0.0.1", port, "none", None, None))
        try:
            for i in range(count):
                await connection.send(envelope, envelope if i + 1 < count else None)
        finally:
            await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection(n // concurrency) for _ in range(concurrency)))
    return (n // concurrency * concurrency) / (time.perf_counter() - started)


async def naive_baseline(url: str, port: int, n: int) -> float:
    """Emails/s with one transaction per email: claim one row, build, send on a new connection, update."""
    started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
        for _ in range(n):
            async with conn.transaction():
                cur = await conn.execute(
                    "SELECT * FROM mailroom.email_queue WHERE status = 'pending' ORDER BY id LIMIT 1"
                    " FOR UPDATE SKIP LOCKED"
                )
                row = await cur.fetchone()
                if row is None:
                    break
                envelope = build_message(row, "bench@example.org")
                await aiosmtplib.send(
                    envelope.content,
                    sender=envelope.sender,
                    recipients=[envelope.recipient],
                    hostname="127.0.0.1",
                    port=port,
                    start_tls=False,
                )
                await conn.execute(
                    "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'naive',"
                    " lease_token = gen_random_uuid(), lease_expires_at = now() WHERE id = %s",
                    (row["id"],),
                )
                await conn.execute(
                    "UPDATE mailroom.email_queue SET status = 'sent' WHERE id = %s", (row["id"],)
                )
    return n / (time.perf_counter() - started)


def rss_mb() -> float:
    """Resident set size of this process now, in MB (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


async def mailroom_worker(url: str, n: int, concurrency: int) -> tuple[float, int, list[float]]:
    """Emails/s for a draining worker, how many it sent, and its RSS sampled every 2 s."""
    settings = Settings(database_url=url, secret_key=generate_key())  # signed Message-IDs, as deployed
    worker = Worker(
        url,
        settings,
        WorkerOptions(concurrency=concurrency, drain=True),
    )
    samples: list[float] = []

    async def sample() -> None:
        while True:
            samples.append(rss_mb())
            await asyncio.sleep(2)

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    await worker.run()
    elapsed = time.perf_counter() - started
    sampler.cancel()
    samples.append(rss_mb())
    return worker.sent / elapsed, worker.sent, samples


def delivery_rate(url: str) -> tuple[float, int]:
    """Sent emails per second over the span of their attempts in send_logs, and how many."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(attempted_at) - min(attempted_at))"
            " FROM mailroom.send_logs WHERE outcome = 'sent'"
        ).fetchone()
    assert row is not None
    sent, span = int(row[0]), float(row[1] or 0.0)
    return (sent / span if span else 0.0), sent


def _children_rss_mb(pid: int) -> list[float]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return []
    sizes = []
    for child in children:
        try:
            with open(f"/proc/{child}/statm", encoding="ascii") as statm:
                sizes.append(int(statm.read().split()[1]) * resource.getpagesize() / 2**20)
        except OSError:
            continue
    return sizes


def worker_processes(url: str, processes: int, concurrency: int) -> tuple[float, int, list[float]]:
    """`mailroom worker --processes P --drain` as operators run it: its rate, sent count, child RSS samples."""
    argv = [
        sys.executable,
        "-m",
        "worker.cli.main",
        "worker",
        "--processes",
        str(processes),
        "--concurrency",
        str(max(1, concurrency // processes)),
        "--drain",
        "--no-producers",
    ]
    env = {**os.environ, "MAILROOM_DATABASE_URL": url}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples: list[float] = []

    def sample() -> None:
        while proc.poll() is None:
            samples.extend(_children_rss_mb(proc.pid))
            time.sleep(1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    sampler.join()
    if code != 0:
        sys.exit(f"mailroom worker --processes {processes} exited with {code}")
    rate, sent = delivery_rate(url)
    return rate, sent, samples


def main() -> None:
    """Run all three against one sink and print the figures and ratios."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    naive_n = min(n, 2_000)
    with database() as url, sink_process() as (port, kind):
        print(f"sink: {kind}; {n} emails; concurrency {concurrency}")
        ceiling = asyncio.run(raw_ceiling(port, n, concurrency))
        print(f"(a) raw ceiling   : {ceiling:8,.0f} msgs/s (aiosmtplib, pre-built bytes, no database)")
        ceilings = [ceiling]
        reset(url)
        bulk_enqueue(url, naive_n)
        naive = asyncio.run(naive_baseline(url, port, naive_n))
        print(f"(b) naive baseline: {naive:8,.0f} emails/s (one transaction per email, {naive_n} emails)")
        reset(url)
        add_bench_sender(url, port)
        bulk_enqueue(url, n)
        _, sent, samples = asyncio.run(mailroom_worker(url, n, concurrency))
        rate, _ = delivery_rate(url)
        print(f"(c) mailroom, 1 process : {rate:8,.0f} emails/s ({sent} sent, {concurrency} connections)")
        results = [("(c)", rate)]
        print(
            f"    worker RSS over the run: first {samples[0]:.0f} MB, max {max(samples):.0f} MB,"
            f" last {samples[-1]:.0f} MB ({len(samples)} samples)"
        )
        processes = os.cpu_count() or 1
        if processes > 1:
            reset(url)
            add_bench_sender(url, port)
            bulk_enqueue(url, n)
            rate, sent, child_rss = worker_processes(url, processes, concurrency)
            print(
                f"(d) mailroom, {processes} processes: {rate:8,.0f} emails/s ({sent} sent,"
                f" {max(1, concurrency // processes)} connections each)"
            )
            results.append(("(d)", rate))
            if child_rss:
                print(f"    RSS per worker process: max {max(child_rss):.0f} MB ({len(child_rss)} samples)")
        # The ceiling again after the worker runs: on a shared machine it moves, and the higher of the
        # two is the honest yardstick.
        ceilings.append(asyncio.run(raw_ceiling(port, n, concurrency)))
        ceiling = max(ceilings)
        print(
            f"(a) raw ceiling, again: {ceilings[-1]:,.0f} msgs/s; the ratios use the higher, {ceiling:,.0f}"
        )
        for label, result in results:
            print(
                f"{label} {result / ceiling:.0%} of the raw ceiling, {result / naive:.1f}x the naive baseline"
            )
        # The ceiling above is stock aiosmtplib (four round trips a message); the worker's own SMTP path
        # needs one. Against that path with no database, the ratio says what recording costs.
        own = asyncio.run(pipelined_ceiling(port, n, concurrency))
        print(f"(e) Mailroom's SMTP path, no database: {own:,.0f} msgs/s")
        for label, result in results:
            print(f"{label} {result / own:.0%} of Mailroom's own SMTP path without a database")


if __name__ == "__main__":
    main()
