"""Time every console refresh query at 1,000,000 pending emails and 10,000,000 send-log rows (target < 50 ms).

    .venv/bin/python -m bench.console_queries [PENDING] [SEND_LOGS] [FAILED] [OPENS]

Tracking: OPENS open events (default 2,000,000), a quarter as many clicks and a tenth as many
unsubscribes, spread like the send log over 60 days (two years for the never-pruned unsubscribe list)
in 50 campaigns.

Builds the data set-based (INSERT ... SELECT generate_series) in a throwaway database, VACUUM
ANALYZEs it, then runs each query of `console.queries` through the console's own data source and
prints the median and worst of several runs.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.common import database
from console import figures
from console import queries as q
from console.queries import ConsoleData

SENDERS = """
INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, daily_limit)
SELECT 'sender-' || g, 'noreply' || g || '@example.com', 'smtp.example.com', 587, 100000
FROM generate_series(1, 5) g
"""

PENDING = """
INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, priority, scheduled_for, campaign_id)
SELECT 'user' || g || '@example.com', 'Subject ' || g, 'body',
       (ARRAY[-5, 0, 0, 0, 10])[1 + g %% 5],
       now() + make_interval(secs => ((g %% 10) - 7) * 600 + g / 1000.0),
       CASE WHEN g %% 4 = 0 THEN NULL ELSE 'campaign-' || (g %% 20) END
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) g
"""

# A share of the pending email has attempts behind it (retrying).
RETRYING = """
UPDATE mailroom.email_queue SET retry_count = 1 + id %% 3, next_retry_at = scheduled_for,
       last_error = '451 4.7.1 greylisted'
WHERE status = 'pending' AND id %% 50 = 0
"""

FAILED = """
WITH made AS (
    INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, scheduled_for)
    SELECT 'failed' || g || '@example.com', 'Subject ' || g, 'body', now() - interval '1 day'
    FROM generate_series(1, %(n)s::bigint) g
    RETURNING id
)
SELECT count(*) FROM made
"""

CLAIM_FAILED = """
UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'bench', lease_token = gen_random_uuid(),
       lease_expires_at = now() + interval '1 hour'
WHERE recipient_email LIKE 'failed%%' AND status = 'pending'
"""

FAIL = """
UPDATE mailroom.email_queue SET status = 'failed', last_error = '550 5.1.1 unknown user'
WHERE status = 'assigned' AND lease_owner = 'bench'
"""

# Failures happen over time, not all in one instant.
SPREAD_FAILED = """
UPDATE mailroom.email_queue SET finished_at = now() - make_interval(secs => id %% 86400)
WHERE status = 'failed'
"""

# Send-log rows spread over the last 60 days, newest minute included.
SEND_LOGS = """
INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, attempt, outcome,
                                smtp_code, response, duration_ms, worker)
SELECT now() - make_interval(secs => (g::float8 * 5184000 / %(total)s)), g,
       (SELECT min(id) FROM mailroom.sender_accounts) + g %% 5, 'user' || g || '@example.com', 1,
       CASE WHEN g %% 40 = 0 THEN 'permanent' WHEN g %% 15 = 0 THEN 'transient' ELSE 'sent' END,
       CASE WHEN g %% 40 = 0 THEN 550 WHEN g %% 15 = 0 THEN 451 ELSE 250 END, 'ok', 40, 'bench'
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) g
"""

# Later reports about sent email: one in 97 a hard bounce, one in 499 a complaint (the senders' rates).
BOUNCE_EVENTS = """
INSERT INTO mailroom.bounce_events (email_id, recipient, kind, source, raw_size, dedupe_key, sender_account_id)
SELECT g, 'user' || g || '@example.com', CASE WHEN g %% 97 = 0 THEN 'hard' ELSE 'complaint' END, 'dsn', 1000,
       'bench-' || g, (SELECT min(id) FROM mailroom.sender_accounts) + g %% 5
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) g
WHERE (g %% 97 = 0 OR g %% 499 = 0) AND g %% 40 <> 0 AND g %% 15 <> 0
"""

OPENS = """
INSERT INTO mailroom.open_events (occurred_at, email_id, campaign_id, ip_address, user_agent)
SELECT now() - make_interval(secs => g::float8 * 5184000 / %(total)s), g, 'campaign-' || (g %% 50),
       '192.0.2.1', 'Mozilla/5.0'
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) g
"""

CLICKS = """
INSERT INTO mailroom.click_events (occurred_at, email_id, link_token, url, campaign_id, ip_address, user_agent)
SELECT now() - make_interval(secs => g::float8 * 5184000 / %(total)s), g, gen_random_uuid(),
       'https://shop.example/p/' || (g %% 100), 'campaign-' || (g %% 50), '192.0.2.1', 'Mozilla/5.0'
FROM generate_series(1, %(total)s::bigint) g
"""

UNSUBSCRIBES = """
INSERT INTO mailroom.unsubscribe_list (email, source, campaign_id, unsubscribed_at)
SELECT 'gone' || g || '@example.com', 'one_click', 'campaign-' || (g %% 50),
       now() - make_interval(secs => g::float8 * 63072000 / %(total)s)
FROM generate_series(1, %(total)s::bigint) g
"""

DOCUMENTS = """
INSERT INTO mailroom.documents (doc_id, title) SELECT 'doc-' || g, 'Document ' || g FROM generate_series(1, 500) g;
INSERT INTO mailroom.expected_signers (doc_id, email, name)
SELECT 'doc-' || d, 'signer' || s || '@example.com', 'Signer ' || s
FROM generate_series(1, 500) d CROSS JOIN generate_series(1, 40) s;
INSERT INTO mailroom.accounts (email, login, status, activated_at)
SELECT 'account' || g || '@example.com', 'account' || g, 'active', now() FROM generate_series(1, 200000) g
"""

CHUNK = 500_000


def _chunks(total: int) -> list[tuple[int, int]]:
    return [(start, min(start + CHUNK - 1, total)) for start in range(1, total + 1, CHUNK)]


def build(url: str, pending: int, send_logs: int, failed: int, opens: int = 2_000_000) -> None:
    """Fill the scratch database, with progress on stderr."""
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", file=sys.stderr, flush=True)

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute(SENDERS)
        for start, stop in _chunks(pending):
            conn.execute(PENDING, {"start": start, "stop": stop})
            say(f"pending email {stop:,}/{pending:,}")
        conn.execute(RETRYING, {})
        conn.execute(FAILED, {"n": failed})
        conn.execute(CLAIM_FAILED)
        conn.execute(FAIL)
        conn.execute(SPREAD_FAILED, {})
        say(f"failed email {failed:,}")
        for start, stop in _chunks(send_logs):
            conn.execute(SEND_LOGS, {"start": start, "stop": stop, "total": send_logs})
            conn.execute(BOUNCE_EVENTS, {"start": start, "stop": stop})
            say(f"send-log rows {stop:,}/{send_logs:,} (and their later bounces and complaints)")
        for start, stop in _chunks(opens):
            conn.execute(OPENS, {"start": start, "stop": stop, "total": opens})
        conn.execute(CLICKS, {"total": opens // 4})
        conn.execute(UNSUBSCRIBES, {"total": opens // 10})
        say(f"tracking: {opens:,} opens, {opens // 4:,} clicks, {opens // 10:,} unsubscribes")
        for statement in DOCUMENTS.split(";"):
            conn.execute(statement)
        say("documents, signers and accounts")
        conn.execute("VACUUM ANALYZE")
        say("vacuum analyze")


def _queries(now: datetime) -> list[tuple[str, str, dict[str, Any]]]:
    page = {"after_at": None, "after_id": None, "pattern": None, "limit": q.PAGE_SIZE + 1}
    cap = {"cap": q.EXACT_LIMIT + 1}
    schedule = {"now": now, "limit": q.PAGE_SIZE, "pattern": None}
    return [
        ("overview: queue counts (capped)", figures.QUEUE_COUNTS, {"now": now, **cap}),
        ("overview: queue estimate (1% sample)", figures.QUEUE_SAMPLE, {"now": now}),
        ("overview: sent per minute, last hour", figures.SENT_PER_MINUTE, {"now": now}),
        ("overview: finished in the last hour", figures.FINISHED_LAST_HOUR, {"now": now}),
        ("overview: opens/clicks/unsubs per hour", q.TRACKING_PER_HOUR, {"now": now}),
        ("overview/senders: sender accounts", q.SENDERS, {"now": now}),
        ("senders: rates over the last 1,000 deliveries", q.REPUTATION, {"window": 1000, "name": None}),
        ("overview/signatures: documents", q.DOCUMENTS, {"limit": 200, "pattern": None}),
        ("signatures: documents matching a text", q.DOCUMENTS, {"limit": 200, "pattern": "%doc-42%"}),
        ("signatures: missing signers", q.MISSING_SIGNERS, {"doc_id": "doc-1"}),
        ("failures: failed, first page", q.FAILED_PAGE, page),
        ("failures: retrying, first page", q.RETRYING_PAGE, page),
        ("failures: counts (capped)", q.FAILURE_COUNTS, cap),
        ("failures: email detail", q.EMAIL_DETAIL, {"id": 1}),
        ("failures: send-log history", q.SEND_HISTORY, {"id": 12345}),
        (
            "accounts: first page",
            q.ACCOUNTS_PAGE,
            {"status": None, "after_id": None, "pattern": None, "limit": q.PAGE_SIZE + 1},
        ),
        ("accounts: counts by status (capped)", q.ACCOUNT_COUNTS, {"cap": q.EXACT_LIMIT + 1}),
        ("schedule: due in 24 hours", q.EVENTS_DUE, schedule),
        ("schedule: missed and failed", q.EVENTS_TROUBLE, schedule),
        ("queue: pending capped count", q.PENDING_CAPPED, {"cap": q.EXACT_LIMIT + 1}),
        ("queue: by priority (1% sample)", q.SAMPLED_BY_PRIORITY, {"now": now}),
        ("queue: by campaign (1% sample)", q.SAMPLED_BY_CAMPAIGN, {"now": now, "pattern": None}),
    ]


async def _timed(runs: int, call: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    await call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


async def measure(url: str, runs: int = 7) -> list[tuple[str, float, float]]:
    """Median and worst milliseconds of each query, then of each screen's whole refresh, after a warm-up."""
    data = ConsoleData(url)
    now = datetime.now(UTC)
    results = []
    try:
        # The page that starts at the last failed email: the failed part runs out, retrying fills it.
        oldest = await data.fetch(
            "SELECT id, finished_at FROM mailroom.email_queue WHERE status = 'failed'"
            " ORDER BY finished_at, id LIMIT 2"
        )
        last_failed = ("failed", oldest[-1]["finished_at"], int(oldest[-1]["id"])) if oldest else None
        for name, query, params in _queries(now):
            results.append(
                (name, *await _timed(runs, lambda query=query, params=params: data.fetch(query, params)))
            )
        for name, call in (
            ("= whole overview refresh", lambda: data.overview(now)),
            ("= whole failures page", lambda: data.failures("all", None)),
            ("= failures page where failed meets retrying", lambda: data.failures("all", last_failed)),
            ("= whole queue screen", lambda: data.queue(now)),
            ("= whole schedule screen", lambda: data.schedule(now)),
            ("= whole senders screen", lambda: data.senders(now)),
        ):
            results.append((name, *await _timed(runs, call)))
    finally:
        await data.close()
    return results


def main(argv: list[str]) -> int:
    """Build, measure, print."""
    pending = int(argv[0]) if argv else 1_000_000
    send_logs = int(argv[1]) if len(argv) > 1 else 10_000_000
    failed = int(argv[2]) if len(argv) > 2 else 100_000
    opens = int(argv[3]) if len(argv) > 3 else 2_000_000
    with database() as url:
        build(url, pending, send_logs, failed, opens)
        results = asyncio.run(measure(url))
    print(
        f"{pending:,} pending emails, {failed:,} failed, {send_logs:,} send-log rows, {opens:,} opens;"
        " target < 50 ms"
    )
    print(f"{'query':<46} {'median ms':>10} {'worst ms':>10}")
    for name, median, worst in results:
        flag = "" if median < 50 or name.startswith("=") else "  over target"
        print(f"{name:<46} {median:>10.1f} {worst:>10.1f}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
