"""Archive rate: `python -m bench.retention [N] [DAYS]` prints sent emails/s through `worker.ops.retention`.

Stores N sent emails spread over DAYS UTC days, all older than the archive age (one in ten with a
tracked link, as campaign email has), then times a dry run and a real `run_maintenance`: each day
written to a gzip JSON-lines file, synced, read back, and only then deleted from the queue. A
second run over the same days (nothing left to archive) shows the fixed cost. Uses
MAILROOM_DATABASE_URL when set (queue emptied), else a throwaway embedded PostgreSQL.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from bench.common import database
from worker.core.config import Settings
from worker.ops.archive_files import read_archive
from worker.ops.retention import run_maintenance

NOW = datetime(2026, 6, 15, 12, tzinfo=UTC)


def store_sent(url: str, n: int, days: int) -> None:
    """N sent emails with realistic bodies, sent over `days` days ending 100 days before NOW."""
    first_day = (NOW - timedelta(days=100 + days)).replace(hour=0)
    copy_sql = "COPY mailroom.email_queue (recipient_email, recipient_name, subject, text_body, html_body) FROM STDIN"
    with psycopg.connect(url) as conn:
        conn.execute("TRUNCATE mailroom.email_queue CASCADE")
        with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            for i in range(n):
                copy.write_row(
                    (
                        f"customer{i}@example.com",
                        f"Customer {i}",
                        f"Your order A-{100000 + i} is confirmed",
                        f"Hello Customer {i},\n\nThank you for your order A-{100000 + i}.\n\nTotal: 26.00 EUR\n",
                        f"<p>Hello Customer {i},</p><p>Thank you for your order <b>A-{100000 + i}</b>.</p>",
                    )
                )
        # Through the status trigger as the worker does it: claimed, then sent at a time spread over the days.
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'bench',"
            " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour'"
        )
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'sent',"
            " sent_at = %s + (id %% %s) * interval '1 day' + (id %% 86399) * interval '1 second'",
            (first_day, days),
        )
        conn.execute(
            "INSERT INTO mailroom.tracked_links (email_id, position, url)"
            " SELECT id, 0, 'https://example.com/o/' || id FROM mailroom.email_queue WHERE id % 10 = 0"
        )
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE mailroom.email_queue")


def main() -> None:
    """Store, archive, report."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    days = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    logging.disable(logging.INFO)
    home = Path(tempfile.mkdtemp(prefix="mailroom-bench-home-"))
    settings = replace(Settings.from_env(), home=home, archive_dir=home / "archive")
    try:
        with database() as url:
            started = time.perf_counter()
            store_sent(url, n, days)
            print(
                f"retention: stored {n} sent emails over {days} days in {time.perf_counter() - started:.1f} s"
            )
            with psycopg.connect(url, autocommit=True) as conn:
                started = time.perf_counter()
                dry = run_maintenance(conn, settings, now=NOW, dry_run=True)
                dry_s = time.perf_counter() - started
                started = time.perf_counter()
                report = run_maintenance(conn, settings, now=NOW)
                elapsed = time.perf_counter() - started
                started = time.perf_counter()
                again = run_maintenance(conn, settings, now=NOW)
                again_s = time.perf_counter() - started
                left = conn.execute("SELECT count(*) FROM mailroom.email_queue").fetchone()
            steps = {s.name: s.rows for s in report.steps}
            files = sorted((home / "archive").glob("emails-*.jsonl.gz"))
            archived = sum(1 for path in files for _ in read_archive(path))
            size = sum(p.stat().st_size for p in files)
            if report.errors or again.errors:
                sys.exit(f"retention: errors {report.errors + again.errors}")
            if not steps["archive_sent"] == archived == n or left != (0,):
                sys.exit(
                    f"retention: {steps['archive_sent']} deleted, {archived} archived, {left} left of {n}"
                )
            print(
                f"retention: dry run counted {dict((s.name, s.rows) for s in dry.steps)['archive_sent']} in {dry_s:.2f} s"
            )
            print(
                f"retention: archived and deleted {n} emails in {elapsed:.2f} s = {n / elapsed:,.0f} emails/s"
                f" ({len(files)} files, {size / n:.0f} bytes/email compressed)"
            )
            print(f"retention: second run with nothing to archive: {again_s:.2f} s")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
