"""Inbox throughput: `python -m bench.ingest [N]` prints order events/s through `worker.producers.inbox.ingest_event`.

Four runs over N distinct `order_placed` events (each renders its email from the template and
enqueues it): one transaction per event (what `mailroom orders ingest` does), N replays of events already
recorded (duplicates: one upsert each, no email), all N in one transaction (a savepoint per event),
and transactions of 200 events. Uses MAILROOM_DATABASE_URL when set (inbox and queue emptied), else
a throwaway embedded PostgreSQL.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psycopg

from bench.common import database
from worker.core.config import Settings
from worker.producers.inbox import ingest_event

BATCH = 200


def events(n: int) -> list[tuple[str, dict[str, Any]]]:
    """N realistic order events: distinct customers and orders, two items each."""
    return [
        (
            f"order-{i}",
            {
                "customer_email": f"customer{i}@example.com",
                "customer_name": f"Customer {i}",
                "order_number": f"A-{100000 + i}",
                "items": [
                    {"name": "Paperback", "quantity": 2, "unit_price": "12.50"},
                    {"name": "Bookmark", "quantity": 1, "unit_price": 1},
                ],
                "total": "26.00",
                "currency": "EUR",
                "locale": "fr" if i % 4 == 0 else "en",
            },
        )
        for i in range(n)
    ]


def reset(url: str) -> None:
    """Empty the inbox and the queue."""
    with psycopg.connect(url) as conn:
        conn.execute("TRUNCATE mailroom.inbox, mailroom.email_queue CASCADE")


def timed(label: str, n: int, run: Callable[[], None]) -> float:
    """Run, print events/s, return the rate."""
    started = time.perf_counter()
    run()
    elapsed = time.perf_counter() - started
    rate = n / elapsed
    print(f"ingest: {label:<32} {n} events in {elapsed:6.2f} s = {rate:8,.0f} events/s", flush=True)
    return rate


def count(url: str) -> tuple[int, int]:
    """(inbox rows, queued emails)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM mailroom.inbox), (SELECT count(*) FROM mailroom.email_queue)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def main() -> None:
    """Run the three measurements and check what they stored."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    logging.disable(logging.INFO)  # one log line per event would measure the terminal
    home = tempfile.mkdtemp(prefix="mailroom-bench-home-")
    os.environ["MAILROOM_HOME"] = home
    batch = events(n)
    with database() as url:
        settings = Settings.from_env()

        def one_per_transaction() -> None:
            with psycopg.connect(url) as conn:
                for message_id, payload in batch:
                    ingest_event(conn, message_id, "shop", "order_placed", payload, settings=settings)

        def one_transaction() -> None:
            with psycopg.connect(url) as conn, conn.transaction():
                for message_id, payload in batch:
                    ingest_event(conn, message_id, "shop", "order_placed", payload, settings=settings)

        def batches() -> None:
            with psycopg.connect(url) as conn:
                for start in range(0, n, BATCH):
                    with conn.transaction():
                        for message_id, payload in batch[start : start + BATCH]:
                            ingest_event(conn, message_id, "shop", "order_placed", payload, settings=settings)

        reset(url)
        timed("one transaction per event", n, one_per_transaction)
        assert count(url) == (n, n)
        timed("duplicates (each replayed once)", n, one_per_transaction)
        assert count(url) == (n, n), "a replay must create nothing"
        reset(url)
        timed("all in one transaction", n, one_transaction)
        assert count(url) == (n, n)
        reset(url)
        timed(f"transactions of {BATCH} events", n, batches)
        assert count(url) == (n, n)
        print(f"ingest: stored {n} inbox rows and {n} emails per run; replays stored none", flush=True)
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
