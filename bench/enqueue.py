"""Enqueue throughput: `python -m bench.enqueue [N] [JOBS] [transactional|marketing] [cli|api]` prints emails/s
for N emails.

`cli` (the default) is `mailroom enqueue` on N JSON lines: the figure includes JSON parsing, validation,
and COPY into the queue (what an operator's bulk load pays). `api` is `mailroom.enqueue_many` on the
same emails as `EmailRequest`s, 1,000 a call and a commit (what an application pays; JOBS is unused);
it also prints the CPU an email cost the application's process and its database backend (from
/proc/PID/schedstat, when the server runs on this machine), figures a busy host moves far less than
the rate.

Uses MAILROOM_DATABASE_URL when set, else a throwaway embedded PostgreSQL. Campaign email needs a
postal address: MAILROOM_POSTAL_ADDRESS when set, else a sample one.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from worker.cli.main import main as mailroom
from worker.core.db import upgrade
from worker.core.embedded import EmbeddedPostgres


def make_file(path: Path, n: int, kind: str = "transactional") -> None:
    """Write N realistic JSON lines: distinct recipients, grouped under a campaign id, one in ten with an
    idempotency key. `transactional` lines are shipping notices (no tracking, no unsubscribe headers);
    `marketing` lines are newsletter email (tracking token, unsubscribe token and List-Unsubscribe headers)."""
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            line = {
                "to": f"customer{i}@example.com",
                "to_name": f"Customer {i}",
                "subject": f"Your order #{100000 + i} has shipped",
                "text": f"Hello Customer {i},\n\nYour order #{100000 + i} is on its way.\n",
                "campaign_id": "shipping",
                "transactional": kind == "transactional",
            }
            if i % 10 == 0:
                line["idempotency_key"] = f"order-{i}"
            out.write(json.dumps(line) + "\n")


API_BATCH = 1000


def _cpu_ms(pid: int) -> float | None:
    """A process's CPU time in ms, to the nanosecond (Linux's schedstat); None where it cannot be read."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6
    except (OSError, ValueError, IndexError):
        return None


def enqueue_api(url: str, data: Path) -> str:
    """`mailroom.enqueue_many` on the file's emails, API_BATCH a call, each call committed; the CPU an
    email cost this process and its backend, as words."""
    import mailroom

    with data.open(encoding="utf-8") as lines:
        requests = [mailroom.EmailRequest(**json.loads(line)) for line in lines]
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        backend = _cpu_ms(row[0]) if row else None
        client = time.process_time()
        for start in range(0, len(requests), API_BATCH):
            mailroom.enqueue_many(conn, requests[start : start + API_BATCH])
            conn.commit()
        client = (time.process_time() - client) * 1e6 / len(requests)
        server = _cpu_ms(row[0]) if row else None
    words = f"; CPU an email: this process {client:.1f} µs"
    if backend is not None and server is not None:
        words += f", its database backend {(server - backend) * 1e3 / len(requests):.1f} µs"
    return words


def main() -> None:
    """Run the benchmark and print its figures."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    jobs = sys.argv[2] if len(sys.argv) > 2 else "2"
    kind = sys.argv[3] if len(sys.argv) > 3 else "transactional"
    door = sys.argv[4] if len(sys.argv) > 4 else "cli"
    if kind not in ("transactional", "marketing") or door not in ("cli", "api"):
        sys.exit("usage: python -m bench.enqueue [N] [JOBS] [transactional|marketing] [cli|api]")
    os.environ.setdefault("MAILROOM_POSTAL_ADDRESS", "Mailroom Bench, 1 Market Street, Bristol BS1 4DJ")
    work = Path(tempfile.mkdtemp(prefix="mailroom-bench-"))
    server = None
    try:
        url = os.environ.get("MAILROOM_DATABASE_URL")
        if not url:
            server = EmbeddedPostgres(work / "home", cleanup_mode="delete")
            url = server.start()
            os.environ["MAILROOM_DATABASE_URL"] = url
        upgrade(url)
        data = work / "mail.jsonl"
        make_file(data, n, kind)
        started = time.perf_counter()
        code = 0
        cpu = ""
        if door == "api":
            cpu = enqueue_api(url, data)
        else:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = mailroom(["enqueue", str(data), "--jobs", jobs])
        elapsed = time.perf_counter() - started
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM mailroom.email_queue").fetchone()
        stored = row[0] if row else 0
        print(
            f"enqueue ({door}): {n} {kind} emails, exit {code}, {stored} rows stored, {elapsed:.2f} s,"
            f" {n / elapsed:,.0f} emails/s"
            + (f" (jobs {jobs})" if door == "cli" else f" ({API_BATCH} a call){cpu}")
        )
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
