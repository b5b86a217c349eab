"""One recipient's attempts, one address's erasure and one campaign's counts in two years of send logs.

    .venv/bin/python -m bench.send_log_history [ROWS] [--runs R] [--without-indexes]

Fills `send_logs` of a throwaway database (or of MAILROOM_DATABASE_URL, its log emptied) with ROWS
attempts (default 10,000,000) spread evenly over 24 month partitions made by
`mailroom.ensure_month_partitions`, generated in the database: 200,000 recipients with ROWS / 200,000
attempts each spread over the two years (one in ten written `User…@Example.com`), 300 campaigns
holding seven attempts in ten, each sent over a few days, the rest transactional; outcomes mostly
sent, one in 15 transient, one in 40 permanent, one in 97 bounced (the address in the reply), one in
199 suppressed. Progress goes to stderr. After VACUUM ANALYZE, each lookup runs R times (a different
address or campaign each time, after one warm-up) and prints its median, its worst, and what its plan
reads (node, count of partitions, index):

- history: one recipient's last 100 attempts, the lookup docs/operations.md gives operators;
- erase: `worker.ops.privacy.erase_address` of one address, the whole erasure (its send_logs statement's plan);
- campaign: one campaign's attempts counted by outcome;
- last sent: `worker.ops.metrics.FIGURES`, whose last send falls back to the newest 'sent' attempt
  when the queue holds no sent email; then again behind 100,000 newer failed attempts (a relay down);
- write: 20,000 more attempts into this month's partition, as the workers add them (what the indexes
  cost each attempt written).

`--without-indexes` runs the undo of the indexes' revision before the fill (the send log as it was
without them), and at the end times its upgrade part: how long `mailroom db upgrade` builds them.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

import migrations
from bench.common import database
from worker.ops.metrics import ALIVE_SECONDS, EXACT_UP_TO, FIGURES
from worker.ops.privacy import address_pattern, erase_address
from worker.ops.privacy_sql import ERASURES

RECIPIENTS = 200_000
CAMPAIGNS = 300
MONTHS = 24
CHUNK = 500_000
OUTAGE = 100_000
# The revision that adds the recipient and campaign indexes: its undo and its upgrade part.
INDEXES = Path(migrations.__file__).parent / "versions" / "0015"

# One address's latest attempts, as docs/operations.md gives it to operators.
HISTORY = """
SELECT attempted_at, email_id, campaign_id, attempt, outcome, smtp_code, response
FROM mailroom.send_logs WHERE lower(recipient_email) = lower(%(addr)s)
ORDER BY attempted_at DESC LIMIT 100
"""

CAMPAIGN = """
SELECT outcome, count(*) AS attempts FROM mailroom.send_logs WHERE campaign_id = %(campaign)s
GROUP BY outcome ORDER BY outcome
"""

# Rows in attempted_at order, as a worker writes them; recipient r gets every 200,000th attempt.
FILL = """
INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, campaign_id,
                                attempt, outcome, smtp_code, enhanced_code, response, duration_ms, worker)
SELECT %(first)s::timestamptz + make_interval(secs => (g - 1) * %(step)s::float8), g, 1 + g %% 5, a.address,
       CASE WHEN g %% 10 < 7 THEN 'campaign-' || ((g - 1) * %(campaigns)s / %(rows)s + 1) END,
       CASE WHEN g %% 7 = 0 THEN 2 ELSE 1 END, v.outcome, v.code, v.enhanced,
       CASE WHEN v.outcome = 'sent' THEN '250 2.0.0 Ok: queued as ' || upper(to_hex(g))
            WHEN v.code IS NOT NULL THEN v.code || ' ' || v.enhanced || ' <' || a.address || '>: ' || v.reply END,
       20 + g %% 900, 'worker-' || g %% 4
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) g
CROSS JOIN LATERAL (SELECT (g * 7919) %% %(recipients)s AS r) k
CROSS JOIN LATERAL (SELECT CASE WHEN k.r %% 10 = 0 THEN 'User' || k.r || '@Example.com'
                                ELSE 'user' || k.r || '@example.com' END AS address) a
CROSS JOIN LATERAL (SELECT CASE WHEN g %% 199 = 0 THEN 'suppressed' WHEN g %% 97 = 0 THEN 'bounced'
                                WHEN g %% 40 = 0 THEN 'permanent' WHEN g %% 15 = 0 THEN 'transient'
                                ELSE 'sent' END AS outcome) o
JOIN (VALUES ('sent', 250, '2.0.0', NULL), ('transient', 451, '4.7.1', 'Greylisted, try again later'),
             ('permanent', 550, '5.7.1', 'Message rejected as spam'),
             ('bounced', 550, '5.1.1', 'Recipient address rejected: User unknown'),
             ('suppressed', NULL, NULL, NULL)) AS v(outcome, code, enhanced, reply) ON v.outcome = o.outcome
"""

# A relay down: the newest attempts all failed, so the newest 'sent' one lies behind them.
OUTAGE_ROWS = """
INSERT INTO mailroom.send_logs (attempted_at, email_id, recipient_email, attempt, outcome, response)
SELECT newest + make_interval(secs => g / 1000.0), %(rows)s + g, 'user' || g %% 5000 || '@example.com', 1,
       'sender_unreachable', 'connection refused'
FROM (SELECT max(attempted_at) AS newest FROM mailroom.send_logs) n, generate_series(1, %(n)s) g
"""

# More attempts into this month's partition, as the workers write them: what the indexes cost a row.
WRITE = """
INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, campaign_id,
                                attempt, outcome, smtp_code, enhanced_code, response, duration_ms, worker)
SELECT now() - make_interval(secs => g %% 3600), g, 1 + g %% 5, 'user' || (g * 7919) %% %(recipients)s || '@example.com',
       CASE WHEN g %% 10 < 7 THEN 'campaign-' || %(campaigns)s END, 1, 'sent', 250, '2.0.0',
       '250 2.0.0 Ok: queued as ' || upper(to_hex(g)), 40, 'worker-0'
FROM generate_series(%(start)s::bigint, %(start)s::bigint + %(n)s - 1) g
"""
WRITTEN = 20_000

SIZES = """
SELECT p.relname AS name, sum(pg_relation_size(i.inhrelid)) AS bytes
FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relnamespace = 'mailroom'::regnamespace AND p.relname LIKE 'send_logs%%'
GROUP BY 1 ORDER BY 1
"""


def say(started: float, text: str) -> None:
    """A progress line on stderr."""
    print(f"[{time.monotonic() - started:7.1f}s] {text}", file=sys.stderr, flush=True)


def address(r: int) -> str:
    """Recipient r (modulo their number) as the fill writes it."""
    r %= RECIPIENTS
    return f"User{r}@Example.com" if r % 10 == 0 else f"user{r}@example.com"


def fill(url: str, rows: int, without_indexes: bool) -> float:
    """The send log of two years, with progress on stderr; returns the seconds it took."""
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("TRUNCATE mailroom.send_logs")
        if without_indexes:
            conn.execute((INDEXES / "10_send_log_lookups.down.sql").read_text(encoding="utf-8"))
            say(started, "indexes on recipient and campaign dropped")
        span = conn.execute(
            "SELECT date_trunc('month', now()) - make_interval(months => %(m)s) AS first,"
            " extract(epoch FROM now() - (date_trunc('month', now()) - make_interval(months => %(m)s)))::float8 AS s",
            {"m": MONTHS - 1},
        ).fetchone()
        assert span is not None
        first, seconds = span
        conn.execute("SELECT mailroom.ensure_month_partitions('send_logs', %s::date, %s)", (first, MONTHS))
        params = {"first": first, "step": seconds / rows, "rows": rows}
        params |= {"campaigns": CAMPAIGNS, "recipients": RECIPIENTS}
        for start in range(1, rows + 1, CHUNK):
            stop = min(start + CHUNK - 1, rows)
            conn.execute(FILL, {**params, "start": start, "stop": stop})
            say(started, f"send-log rows {stop:,}/{rows:,}")
        filled = time.monotonic() - started
        conn.execute("VACUUM ANALYZE mailroom.send_logs")
        say(started, "vacuum analyze")
    return filled


def timed(runs: int, call: Callable[[int], object]) -> tuple[float, float, object]:
    """Median and worst milliseconds of `call(k)` for k in 1..runs, after `call(0)`; and the last result."""
    call(0)
    times = []
    result: object = None
    for k in range(1, runs + 1):
        began = time.perf_counter()
        result = call(k)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), max(times), result


def plan_reads(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> str:
    """The plan's top nodes, then what it reads of send_logs: each scan node and index (by its parent index)
    with how many partitions it reads so; a sequential scan of a partition that holds nothing counts apart."""
    parents = dict(
        conn.execute(
            "SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " JOIN pg_class p ON p.oid = i.inhparent WHERE p.relkind = 'I'"
        ).fetchall()
    )
    empty = {r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relkind = 'r' AND relpages = 0")}
    row = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
    assert row is not None
    reads: Counter[str] = Counter()

    def walk(node: dict[str, Any]) -> None:
        index = parents.get(node.get("Index Name", ""), node.get("Index Name", ""))
        relation = node.get("Relation Name", "")
        if index.startswith("send_logs"):
            reads[f"{node['Node Type']} on {index}"] += 1
        elif node["Node Type"] == "Seq Scan" and relation.startswith("send_logs"):
            reads["Seq Scan" + (" (empty partition)" if relation in empty else "")] += 1
        for child in node.get("Plans", ()):
            walk(child)

    top, node = [], row[0][0]["Plan"]
    while True:
        top.append(node["Node Type"])
        if len(node.get("Plans", ())) != 1 or "Relation Name" in node:
            break
        node = node["Plans"][0]
    walk(row[0][0]["Plan"])
    return " > ".join(top) + ": " + ", ".join(f"{what} x{n}" for what, n in sorted(reads.items()))


def measure(url: str, rows: int, runs: int) -> list[tuple[str, float, float, str, str]]:
    """Each lookup's median and worst milliseconds, what it found, and what its plan reads."""
    results = []
    with psycopg.connect(url, autocommit=True) as conn:
        lookups: list[tuple[str, Callable[[int], object], str, dict[str, Any]]] = [
            (
                "history: one recipient's last 100 attempts",
                lambda k: len(conn.execute(HISTORY, {"addr": address(1 + k * 9973)}).fetchall()),
                HISTORY,
                {"addr": address(1)},
            ),
            (
                "erase: privacy erase of one address",
                lambda k: erase_address(conn, address(100_003 + k * 7919)).rows["send_logs"],
                dict(ERASURES)["send_logs"],
                _erase_params(address(100_003).lower()),
            ),
            (
                "campaign: attempts by outcome",
                lambda k: sum(
                    r[1] for r in conn.execute(CAMPAIGN, {"campaign": f"campaign-{1 + k * 37 % CAMPAIGNS}"})
                ),
                CAMPAIGN,
                {"campaign": "campaign-1"},
            ),
            ("last sent: the metrics' figures", lambda k: _figures(conn), FIGURES, _figures_params()),
        ]
        for name, call, statement, params in lookups:
            median, worst, found = timed(runs, call)
            rows_found = f"{found:,} rows" if isinstance(found, int) else ""
            results.append((name, median, worst, rows_found, plan_reads(conn, statement, params)))
        conn.execute(OUTAGE_ROWS, {"rows": rows, "n": OUTAGE})
        conn.execute("ANALYZE mailroom.send_logs")
        median, worst, _ = timed(runs, lambda k: _figures(conn))
        plan = plan_reads(conn, FIGURES, _figures_params())
        results.append((f"last sent behind {OUTAGE:,} failed attempts", median, worst, "", plan))
        results.append(write_cost(conn, rows + OUTAGE, runs))
    return results


def write_cost(conn: psycopg.Connection[Any], after: int, runs: int) -> tuple[str, float, float, str, str]:
    """Milliseconds to write WRITTEN more attempts into this month, and microseconds a row."""
    params = {"recipients": RECIPIENTS, "campaigns": CAMPAIGNS, "n": WRITTEN}
    median, worst, _ = timed(
        runs, lambda k: conn.execute(WRITE, {**params, "start": after + k * WRITTEN + 1})
    )
    return (
        f"write: {WRITTEN:,} attempts into this month",
        median,
        worst,
        f"{median * 1000 / WRITTEN:.1f} µs a row",
        "",
    )


def _erase_params(addr: str) -> dict[str, Any]:
    return {"addr": addr, "anon": "erased-0@erased.invalid", "re": address_pattern(addr), "ids": []}


def _figures_params() -> dict[str, Any]:
    return {"cap": EXACT_UP_TO, "alive": ALIVE_SECONDS}


def _figures(conn: psycopg.Connection[Any]) -> object:
    return conn.execute(FIGURES, _figures_params()).fetchone()


def sizes(url: str) -> str:
    """The send log's heap and indexes, each summed over its partitions."""
    with psycopg.connect(url) as conn:
        found = conn.execute(SIZES).fetchall()
    return ", ".join(
        f"{'heap' if name == 'send_logs' else name} {int(n) / 2**20:,.0f} MiB" for name, n in found
    )


def build_indexes(url: str) -> float:
    """Seconds the revision's upgrade part takes to build the indexes on the filled log."""
    with psycopg.connect(url) as conn:
        began = time.perf_counter()
        conn.execute((INDEXES / "10_send_log_lookups.sql").read_text(encoding="utf-8"))
        conn.commit()
        return time.perf_counter() - began


def main() -> int:
    """Fill, measure, print."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rows", nargs="?", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each lookup (after one warm-up)")
    parser.add_argument(
        "--without-indexes", action="store_true", help="drop the recipient and campaign indexes first"
    )
    args = parser.parse_args()
    logging.disable(logging.INFO)
    with database() as url:
        filled = fill(url, args.rows, args.without_indexes)
        results = measure(url, args.rows, args.runs)
        kind = "without" if args.without_indexes else "with"
        print(f"{args.rows:,} send-log rows over {MONTHS} months, {kind} the recipient and campaign indexes")
        print(f"filled in {filled:.0f} s; sizes: {sizes(url)}")
        print(f"{'lookup':<44} {'median ms':>10} {'worst ms':>10}  found")
        for name, median, worst, found, plan in results:
            flag = "" if median < 1000 else "  over 1 s"
            print(f"{name:<44} {median:>10.1f} {worst:>10.1f}  {found}{flag}")
            if plan:
                print(f"{'':<4}plan: {plan}")
        if args.without_indexes:
            print(f"building them (the upgrade part): {build_indexes(url):.1f} s; sizes: {sizes(url)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
