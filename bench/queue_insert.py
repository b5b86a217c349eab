"""What a queued email costs PostgreSQL by itself: the floor under every way into the queue.

    python -m bench.queue_insert [N] [ROUNDS]

One `INSERT INTO mailroom.email_queue ... SELECT` of N generated shipping notices (the emails
`bench.enqueue` sends, one in ten with an idempotency key), made in the server, so no client, no
parameter and no door is in the figure. It runs ROUNDS times in each of three states of the table,
and prints the backend's CPU per email (from /proc/PID/schedstat: the server must run on this machine)
for each, median and lowest:

- `as shipped`: every index, constraint and trigger of the queue;
- `without triggers`: the same table with its triggers disabled (the statement triggers that store
  suppressed email, check content rules and wake the workers; the row trigger; the foreign keys);
- `without secondary indexes`: also without the indexes other than the primary key and the unique
  ones (the claim's, the due email's, the recipient's, the campaign's, ...).

Uses a throwaway embedded PostgreSQL (MAILROOM_DATABASE_URL is ignored: the bench drops indexes).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import psycopg

from worker.core.db import upgrade
from worker.core.embedded import EmbeddedPostgres

INSERT = """
INSERT INTO mailroom.email_queue (recipient_email, recipient_name, subject, text_body, campaign_id,
                                  transactional, idempotency_key, scheduled_for)
SELECT 'customer' || i || '@example.com', 'Customer ' || i, 'Your order #' || (100000 + i) || ' has shipped',
       'Hello Customer ' || i || E',\\n\\nYour order #' || (100000 + i) || E' is on its way.\\n', 'shipping', true,
       CASE WHEN i %% 10 = 0 THEN 'order-' || %(round)s || '-' || i END, now()
FROM generate_series(1, %(n)s) AS i
"""
SECONDARY = """
SELECT indexrelid::regclass::text FROM pg_index
WHERE indrelid = 'mailroom.email_queue'::regclass AND NOT indisprimary AND NOT indisunique
"""


def backend_cpu_ms(pid: int) -> float:
    """The backend's CPU time so far, in ms (Linux's schedstat, to the nanosecond)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6


def rounds(conn: psycopg.Connection[tuple[object, ...]], n: int, count: int, tag: str) -> list[float]:
    """CPU µs an email of COUNT inserts of N emails, each committed."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    pid = int(str(row[0]))
    costs = []
    for r in range(count):
        before = backend_cpu_ms(pid)
        conn.execute(INSERT, {"n": n, "round": f"{tag}{r}"})
        conn.commit()
        costs.append((backend_cpu_ms(pid) - before) * 1e3 / n)
    return costs


def report(label: str, costs: list[float]) -> None:
    print(
        f"{label:26} median {statistics.median(costs):5.1f} µs an email, lowest {min(costs):5.1f}", flush=True
    )


def main() -> None:
    """Run the three states and print their figures."""
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory(prefix="mailroom-bench-") as work:
        server = EmbeddedPostgres(Path(work) / "home", cleanup_mode="delete")
        try:
            url = server.start()
            upgrade(url)
            with psycopg.connect(url) as conn:
                print(f"{count} inserts of {n} emails in each state", flush=True)
                report("as shipped", rounds(conn, n, count, "a"))
                conn.execute("ALTER TABLE mailroom.email_queue DISABLE TRIGGER ALL")
                conn.commit()
                report("without triggers", rounds(conn, n, count, "b"))
                for (index,) in conn.execute(SECONDARY).fetchall():
                    conn.execute(f"DROP INDEX {index}")  # names from the catalog, already quoted
                conn.commit()
                report("without secondary indexes", rounds(conn, n, count, "c"))
        finally:
            server.close()


if __name__ == "__main__":
    main()
