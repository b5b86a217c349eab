"""Delivery of email with attachments: emails/s and the worker's peak memory.

    python -m bench.attachments [N] [SIZE_KB] [DISTINCT] [CONCURRENCY]

Enqueues N emails (default 1,000) through the Python API, each carrying a PDF of SIZE_KB (default 1,024):
DISTINCT different PDFs (default 10) spread over them, stored once each. Then `mailroom worker --drain
--no-producers --concurrency C` (default 4) sends them to a sink on loopback (Postfix's smtp-sink when
installed), in its own process, whose peak resident memory (VmHWM) is reported with the rate over
the span of the attempts in send_logs. Goal of the issue that asked for it: under 150 MB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psycopg

from bench.common import add_bench_sender, database, sink_process
from bench.throughput import delivery_rate
from mailroom import Attachment, EmailRequest, enqueue_many


def enqueue(url: str, n: int, size_kb: int, distinct: int) -> float:
    """The emails, in batches of 50; seconds it took."""
    pdfs = [b"%PDF-1.7\n" + os.urandom(size_kb * 1024 - 16) + b"\n%%EOF\n" for _ in range(distinct)]
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        for start in range(0, n, 50):
            requests = [
                EmailRequest(
                    to=f"user{i}@example.com",
                    subject=f"Your invoice {i}",
                    text="Your invoice is attached.\n",
                    attachments=[Attachment(f"invoice-{i}.pdf", pdfs[i % distinct])],
                )
                for i in range(start, min(n, start + 50))
            ]
            enqueue_many(conn, requests)
            conn.commit()
    return time.perf_counter() - started


def _peak_mb(proc: subprocess.Popen[bytes]) -> float:
    """The worker's peak resident memory: its VmHWM, read until it exits. (ru_maxrss would count the
    bench process itself, whose memory the child holds between fork and exec.)"""
    peak = 0.0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:
            break
        time.sleep(0.1)
    proc.wait()
    return peak


def main() -> None:
    """Enqueue, drain with one worker process, print the figures."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000
    size_kb = int(sys.argv[2]) if len(sys.argv) > 2 else 1_024
    distinct = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    with database() as url, sink_process() as (port, kind):
        add_bench_sender(url, port)
        took = enqueue(url, n, size_kb, distinct)
        print(
            f"enqueued {n} emails with a {size_kb} KB PDF ({distinct} distinct) in {took:.1f} s", flush=True
        )
        argv = [sys.executable, "-m", "worker.cli.main", "worker", "--drain", "--no-producers"]
        argv += ["--concurrency", str(concurrency)]
        env = {**os.environ, "MAILROOM_DATABASE_URL": url}
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peak_mb = _peak_mb(proc)
        if proc.returncode != 0:
            sys.exit(f"mailroom worker exited with {proc.returncode}")
        rate, sent = delivery_rate(url)
        print(f"sink: {kind}; concurrency {concurrency}")
        print(f"sent {sent} of {n}: {rate:,.0f} emails/s, {rate * size_kb / 1024:,.1f} MB/s of attachments")
        print(f"worker peak RSS: {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
