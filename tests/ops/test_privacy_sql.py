"""Privacy export and erase find an address's send logs through `send_logs_recipient_idx`, a probe per month
partition instead of a scan of every one of them, and so does the look at one recipient's attempts that
docs/operations.md gives operators (`bench.send_log_history` times them at 10,000,000 rows)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from worker.ops.privacy import address_pattern
from worker.ops.privacy_sql import ERASURES, EXPORTS

# One recipient's latest attempts, as docs/operations.md writes it.
HISTORY = """SELECT * FROM mailroom.send_logs WHERE lower(recipient_email) = lower(%(addr)s)
ORDER BY attempted_at DESC LIMIT 100"""

# 20,000 attempts to 2,000 recipients over the last 40 days, in this month's partition and the one before
# (or the default one): an address is ten rows in 20,000, which only an index finds without reading them all.
FILL = """
INSERT INTO mailroom.send_logs (attempted_at, email_id, recipient_email, attempt, outcome, response)
SELECT now() - make_interval(secs => g * 170), g, 'User' || g % 2000 || '@Example.com', 1, 'sent', '250 2.0.0 Ok'
FROM generate_series(1, 20000) g
"""

ADDRESS = "user7@example.com"
PARAMS = {
    "addr": ADDRESS,
    "anon": "erased-0@erased.invalid",
    "re": address_pattern(ADDRESS),
    "ids": [7, 2007],  # two of the address's emails still in the queue
}


def partition_reads(conn: psycopg.Connection[Any], statement: str) -> dict[str, set[str]]:
    """For each send_logs partition holding rows, what the statement's plan reads it with: the
    partitioned indexes its partition indexes belong to, or `Seq Scan`."""
    parents = {
        r["child"]: r["parent"]
        for r in conn.execute(
            "SELECT c.relname AS child, p.relname AS parent FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent WHERE p.relkind = 'I'"
        )
    }
    holding = {
        r["name"]
        for r in conn.execute("SELECT DISTINCT tableoid::regclass::text AS name FROM mailroom.send_logs")
    }
    plan = conn.execute("EXPLAIN (FORMAT JSON) " + statement, PARAMS).fetchone()
    assert plan is not None
    reads: dict[str, set[str]] = {}

    def indexes(node: dict[str, Any]) -> set[str]:
        found = {parents.get(node["Index Name"], node["Index Name"])} if "Index Name" in node else set()
        return found.union(*(indexes(child) for child in node.get("Plans", ())))

    def walk(node: dict[str, Any]) -> None:
        relation = f"mailroom.{node.get('Relation Name')}"
        if relation in holding:
            reads[relation] = {"Seq Scan"} if node["Node Type"] == "Seq Scan" else indexes(node)
        for child in node.get("Plans", ()):
            walk(child)

    walk(plan["QUERY PLAN"][0]["Plan"])
    return {name: reads.get(name, {"not read"}) for name in holding}


@pytest.mark.parametrize(
    "statement",
    [dict(ERASURES)["send_logs"], EXPORTS["send_logs"], HISTORY],
    ids=["privacy erase", "privacy export", "recipient history"],
)
def test_an_address_s_send_logs_are_found_through_the_recipient_index(
    conn: psycopg.Connection[Any], statement: str
) -> None:
    conn.execute(FILL)
    conn.execute("ANALYZE mailroom.send_logs")
    reads = partition_reads(conn, statement)
    assert reads, "the attempts landed in no partition"
    assert all("send_logs_recipient_idx" in how for how in reads.values()), reads
    assert conn.execute(statement, PARAMS).rowcount == 10  # every attempt to User7@Example.com
