"""The claim's suppression verdict against large lists: this tree's CLAIM beside an earlier commit's.

    .venv/bin/python -m bench.claim_suppression [REV] [--rounds R] [--repeat K] [--batch N]

A throwaway database (or MAILROOM_DATABASE_URL) gets 100,000 bounce_list rows (hard, complaint, manual,
soft once to four times), 50,000 unsubscribe_list rows and 20,000 pending emails, a third of them to a
bounced address and a sixth to an unsubscribed one, half transactional. Each round runs, in turn and
each rolled back, REV's `worker.engine.queue_sql.CLAIM` (read with `git show`, default HEAD~1), this
tree's, and this tree's with `mailroom.suppression_reason(...)` called per row instead of the inlined
`mailroom.suppression_verdict` over the joins (the design it was measured against), each under
EXPLAIN ANALYZE for one batch, R rounds alternating the order, each variant claimed --repeat times a
round (its median counts). Printed per variant: the median time of the materialized `verdict` step and
of the whole statement, and the verdict's ratio to REV's per round (median, middle half, lowest and highest).
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import uuid
from pathlib import Path
from typing import Any

import psycopg

from bench.common import database
from worker.engine import queue_sql

ROOT = Path(__file__).resolve().parents[1]

SENDER = (
    "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, daily_limit)"
    " VALUES ('bench', 'bench@example.org', '127.0.0.1', 25, 10000000) RETURNING id"
)
# The queue first: an email to a listed address would be stored suppressed at enqueue.
QUEUE = """
INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, transactional)
SELECT CASE WHEN g % 6 IN (0, 1) THEN 'b' || (g * 7 % 100000 + 1) || '@example.com'
            WHEN g % 6 = 2 THEN 'u' || (g * 11 % 50000 + 1) || '@example.com'
            ELSE 'n' || g || '@example.com' END,
       'Benchmark ' || g, 'Hello.', g % 2 = 0
FROM generate_series(1, 20000) g
"""
BOUNCES = """
INSERT INTO mailroom.bounce_list (email, bounce_type, bounce_count, first_bounced_at, last_bounced_at)
SELECT 'b' || g || '@example.com',
       CASE WHEN g % 20 < 13 THEN 'hard' WHEN g % 20 < 15 THEN 'complaint' WHEN g % 20 < 16 THEN 'manual'
            ELSE 'soft' END,
       CASE WHEN g % 20 >= 16 THEN g % 4 + 1 ELSE 1 END,
       now() - interval '3 days', now() - make_interval(hours => g % 48)
FROM generate_series(1, 100000) g
"""
UNSUBSCRIBES = """
INSERT INTO mailroom.unsubscribe_list (email, source)
SELECT 'u' || g || '@example.com', 'one_click' FROM generate_series(1, 50000) g
"""
INLINED = "mailroom.suppression_verdict(b.bounce_type, b.bounce_count, u.email IS NOT NULL, q.transactional)"
LOOKUP = "mailroom.suppression_reason(q.recipient_email, q.transactional)"


def claim_at(revision: str) -> str:
    """`queue_sql.CLAIM` as the commit `revision` wrote it."""
    source = subprocess.run(
        ["git", "show", f"{revision}:worker/engine/queue_sql.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["CLAIM"]:
            return str(ast.literal_eval(node.value))
    raise LookupError(f"no CLAIM in {revision}:worker/engine/queue_sql.py")


def build(url: str) -> int:
    """Fill the lists and the queue; the sender's id."""
    with psycopg.connect(url) as conn:
        row = conn.execute(SENDER).fetchone()
        assert row is not None
        for statement in (QUEUE, BOUNCES, UNSUBSCRIBES):
            conn.execute(statement)  # no parameters: % is taken as written
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE mailroom.email_queue, mailroom.bounce_list, mailroom.unsubscribe_list")
    return int(row[0])


def _verdict_ms(plan: dict[str, Any]) -> float:
    """The materialized `verdict` CTE's own time (the due rows it reads included)."""
    stack = [plan["Plan"]]
    while stack:
        node = stack.pop()
        if node.get("Subplan Name") == "CTE verdict":
            return float(node["Actual Total Time"])
        stack.extend(node.get("Plans", []))
    raise LookupError("no CTE verdict in the plan")


def run_once(url: str, claim: str, sender: int, batch: int) -> tuple[float, float]:
    """One claim under EXPLAIN ANALYZE, rolled back: (verdict ms, statement ms)."""
    params = {"limit": batch, "owner": "bench", "token": uuid.uuid4(), "lease": 60, "sender": sender,
              "lifetime": 5 * 86400, "expired": "expired", "own_expired": "expired", "ahead": 0,
              "stream": "transactional", "domains": []}  # fmt: skip
    with psycopg.connect(url) as conn:
        conn.execute(queue_sql.CLAIM_IN_INDEX_ORDER)
        row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + claim, params).fetchone()
        conn.rollback()
    assert row is not None
    plan = row[0][0]
    return _verdict_ms(plan), float(plan["Execution Time"])


def report(name: str, runs: list[tuple[float, float]], base: list[tuple[float, float]]) -> None:
    """A variant's medians and its verdict's ratio to the base's, per round: median, middle half, extremes."""
    verdict = statistics.median(r[0] for r in runs)
    total = statistics.median(r[1] for r in runs)
    ratios = [r[0] / b[0] for r, b in zip(runs, base, strict=True)]
    low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    print(
        f"{name:<28} verdict {verdict:7.3f} ms  statement {total:7.3f} ms  verdict ratio"
        f" {statistics.median(ratios):.2f} (middle half {low:.2f}-{high:.2f}, all {min(ratios):.2f}-{max(ratios):.2f})"
    )


def main() -> int:
    """Build the data once, then alternate the variants for the rounds asked."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("revision", nargs="?", default="HEAD~1")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--repeat", type=int, default=5, help="claims per variant and round (their median counts)"
    )
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    this = queue_sql.CLAIM
    variants = {f"{args.revision} (written out)": claim_at(args.revision), "this tree (inlined)": this}
    if INLINED in this:
        variants["lookup function per row"] = this.replace(INLINED, LOOKUP, 1)
    with database() as url:
        sender = build(url)
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for claim in variants.values():  # warm the cache
            run_once(url, claim, sender, args.batch)
        for round_ in range(args.rounds):
            order = list(variants.items())
            for name, claim in order if round_ % 2 == 0 else reversed(order):
                repeats = [run_once(url, claim, sender, args.batch) for _ in range(args.repeat)]
                runs[name].append(
                    (statistics.median(r[0] for r in repeats), statistics.median(r[1] for r in repeats))
                )
        print(
            f"{args.batch} emails per claim, {args.rounds} rounds of {args.repeat}, 100,000 bounced, 50,000 unsubscribed"
        )
        base = runs[next(iter(variants))]
        for name in variants:
            report(name, runs[name], base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
