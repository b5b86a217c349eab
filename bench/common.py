"""Shared set-up for the benchmarks: a throwaway database, a sink in its own process, bulk email."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from worker.core.crypto import SecretBox, generate_key
from worker.core.db import upgrade
from worker.core.embedded import EmbeddedPostgres
from worker.ops.senders import SenderSpec, add_sender


@contextlib.contextmanager
def database() -> Iterator[str]:
    """MAILROOM_DATABASE_URL when set (tables emptied), else a throwaway embedded PostgreSQL."""
    url = os.environ.get("MAILROOM_DATABASE_URL")
    work = Path(tempfile.mkdtemp(prefix="mailroom-bench-"))
    server = None
    try:
        if not url:
            server = EmbeddedPostgres(work / "home", cleanup_mode="delete")
            url = server.start()
        upgrade(url)
        yield url
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(work, ignore_errors=True)


def reset(url: str) -> None:
    """Empty the queue, logs and senders between runs."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "TRUNCATE mailroom.email_queue, mailroom.send_logs, mailroom.sender_usage,"
            " mailroom.sender_accounts, mailroom.bounce_list CASCADE"
        )


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def sink_process() -> Iterator[tuple[int, str]]:
    """Postfix's smtp-sink when installed (a fast C sink), else `mailroom sink` in its own process."""
    port = free_port()
    c_sink = shutil.which("smtp-sink")
    if c_sink:
        cmd = [c_sink, "-c", "-u", "nobody", f"127.0.0.1:{port}", "256"]
        kind = "postfix smtp-sink"
    else:
        cmd = [sys.executable, "-m", "worker.cli.main", "sink", "--port", str(port)]
        kind = "aiosmtpd (mailroom sink)"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            time.sleep(0.05)
        yield port, kind
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def add_bench_sender(url: str, port: int) -> None:
    """One sender account with a limit far above any run."""
    with psycopg.connect(url) as conn:
        add_sender(
            conn,
            SenderSpec(
                "bench",
                "bench@example.org",
                "127.0.0.1",
                port,
                None,
                "none",
                None,
                10_000_000,
                max_connections=64,
            ),
            None,
            SecretBox(generate_key()),
        )


def bulk_enqueue(url: str, n: int) -> None:
    """N small emails, straight in with COPY, then the queue vacuumed and analyzed: the statistics
    autovacuum leaves on a queue loaded in bulk (every email pending), which the engine's plans must
    stand (see the note on held-email lookups in `worker.engine.queue_sql`)."""
    statement = "COPY mailroom.email_queue (recipient_email, subject, text_body) FROM STDIN"
    with psycopg.connect(url) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
        for i in range(n):
            copy.write_row((f"user{i}@example.com", f"Benchmark message {i}", "Hello from the benchmark.\n"))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE mailroom.email_queue")


TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int, *, with_reaped_children: bool = False) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # utime, stime (and cutime, cstime: children that exited and were waited for) in clock ticks
    ticks = int(fields[11]) + int(fields[12])
    if with_reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS


def server_cpu_seconds(postmaster: int) -> float:
    """CPU of the whole server so far: postmaster, exited backends and the live ones."""
    total = _cpu_seconds(postmaster, with_reaped_children=True)
    with open(f"/proc/{postmaster}/task/{postmaster}/children", encoding="ascii") as f:
        for child in f.read().split():
            try:
                total += _cpu_seconds(int(child))
            except OSError:
                continue  # exited meanwhile: counted in the postmaster's reaped children next time
    return total


def postmaster_pid(url: str) -> int:
    """The server's postmaster: the parent of this connection's backend."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        with open(f"/proc/{row[0]}/stat", encoding="ascii") as stat:  # while the backend lives
            return int(stat.read().rsplit(")", 1)[1].split()[1])
