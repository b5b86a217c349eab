"""Bulk enqueue throughput: `python -m bench.enqueue [N] [JOBS] [transactional|marketing]` prints emails/s for
`mailroom enqueue` on N lines.

Uses MAILROOM_DATABASE_URL when set, else a throwaway embedded PostgreSQL. The figure
includes JSON parsing, validation, and COPY into the queue (what an operator's bulk load pays).
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


def main() -> None:
    """Run the benchmark and print its figures."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    jobs = sys.argv[2] if len(sys.argv) > 2 else "2"
    kind = sys.argv[3] if len(sys.argv) > 3 else "transactional"
    if kind not in ("transactional", "marketing"):
        sys.exit("usage: python -m bench.enqueue [N] [JOBS] [transactional|marketing]")
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
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = mailroom(["enqueue", str(data), "--jobs", jobs])
        elapsed = time.perf_counter() - started
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM mailroom.email_queue").fetchone()
        stored = row[0] if row else 0
        print(
            f"enqueue: {n} {kind} lines, exit {code}, {stored} rows stored, {elapsed:.2f} s, {n / elapsed:,.0f} emails/s (jobs {jobs})"
        )
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
