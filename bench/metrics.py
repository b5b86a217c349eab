"""Scrape cost at scale: `python -m bench.metrics [EMAILS]` (default 1,000,000 queued).

Fills the queue with EMAILS pending emails (two thirds due now, the rest in an hour),
EMAILS / 10 sent ones, five senders and EMAILS / 10 send-log rows, then prints the median time of:
  1. one read of the database's gauges (`worker.ops.metrics.DatabaseGauges`, uncached) -- what one
     scrape costs PostgreSQL at most once per cache period;
  2. one whole HTTP scrape of a listener (`/metrics`, the gauges cached as in production);
  3. for comparison, the exact `count(*) ... GROUP BY status` over the queue the gauges avoid;
each right after the load and after VACUUM ANALYZE (the statistics autovacuum keeps: the gauges use
its estimates past 10,000 rows per status, the planner its statistics for the reputation window).
"""

from __future__ import annotations

import statistics
import sys
import time
import urllib.request
from collections.abc import Callable

import psycopg

from bench.common import database
from worker.core import metrics
from worker.core.config import Settings
from worker.ops.metrics import DatabaseGauges
from worker.ops.metrics_server import WORKER, serve_here

SENDERS = """
INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, daily_limit)
SELECT 'sender-' || g, 'noreply' || g || '@example.com', 'smtp.example.com', 587, 100000
FROM generate_series(1, 5) g
"""

PENDING = """
INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, scheduled_for)
SELECT 'user' || g || '@example.com', 'Subject ' || g, 'body',
       now() + make_interval(secs => CASE WHEN g %% 3 = 0 THEN 3600 ELSE -600 END)
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) g
"""

SENT = """
UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'bench', lease_token = gen_random_uuid(),
       lease_expires_at = now() + interval '1 hour'
WHERE id IN (SELECT id FROM mailroom.email_queue WHERE status = 'pending' ORDER BY id LIMIT %(n)s)
"""

FINISH_SENT = (
    "UPDATE mailroom.email_queue SET status = 'sent' WHERE status = 'assigned' AND lease_owner = 'bench'"
)

SEND_LOGS = """
INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, attempt, outcome,
                                smtp_code, response, duration_ms, worker)
SELECT now() - make_interval(secs => g), g, (SELECT min(id) FROM mailroom.sender_accounts) + g %% 5,
       'user' || g || '@example.com', 1, CASE WHEN g %% 40 = 0 THEN 'bounced' ELSE 'sent' END,
       CASE WHEN g %% 40 = 0 THEN 550 ELSE 250 END, 'ok', 40, 'bench'
FROM generate_series(1, %(n)s::bigint) g
"""

NAIVE = "SELECT status, count(*) FROM mailroom.email_queue GROUP BY status"
ROUNDS = 15


def _median_ms(run: Callable[[], object], rounds: int = ROUNDS) -> float:
    run()  # warm the caches: a scrape every few seconds finds them warm
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _fill(url: str, emails: int) -> None:
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SENDERS)
        step = 200_000
        for start in range(1, emails + emails // 10 + 1, step):
            stop = min(start + step - 1, emails + emails // 10)
            conn.execute(PENDING, {"start": start, "stop": stop})
        conn.execute(SENT, {"n": emails // 10})
        conn.execute(FINISH_SENT)
        conn.execute(SEND_LOGS, {"n": emails // 10})
    print(
        f"filled {emails:,} pending and {emails // 10:,} sent emails in {time.perf_counter() - started:.0f} s"
    )


def _measure(url: str, settings: Settings, label: str) -> None:
    gauges = DatabaseGauges(url, settings, cache_seconds=0.0)
    server = serve_here("127.0.0.1", 0, url, settings, WORKER)
    scrape_url = f"http://127.0.0.1:{server.port}/metrics"

    def scrape() -> bytes:
        with urllib.request.urlopen(scrape_url, timeout=30) as response:
            return bytes(response.read())

    try:
        read = _median_ms(lambda: list(gauges.collect()))
        whole = _median_ms(scrape)
        with psycopg.connect(url, autocommit=True) as conn:
            naive = _median_ms(lambda: conn.execute(NAIVE).fetchall(), rounds=5)
    finally:
        server.close()
        gauges.close()
        metrics.disable()
    print(f"{label}: database gauges read {read:.1f} ms; whole scrape (cached) {whole:.1f} ms;"
          f" exact count(*) by status {naive:.0f} ms")  # fmt: skip


def main() -> None:
    """Fill, measure, ANALYZE, measure again."""
    emails = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with database() as url:
        settings = Settings(database_url=url)
        _fill(url, emails)
        _measure(url, settings, "right after the load")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")  # what autovacuum keeps up to date
        _measure(url, settings, "after VACUUM ANALYZE")
        gauges = DatabaseGauges(url, settings, cache_seconds=0.0)
        families = {f.name: f for f in gauges.collect()}
        gauges.close()
        shown = {s.labels["status"]: int(s.value) for s in families["mailroom_queue_emails"].samples}
        print(f"queue as the gauges report it: {shown}")


if __name__ == "__main__":
    main()
