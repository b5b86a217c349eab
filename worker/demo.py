"""`mailroom demo`: the product on one machine: embedded PostgreSQL, a local SMTP server, demo data."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import replace
from typing import Any

import psycopg

from worker.config import Settings
from worker.crypto import SecretBox, key_file, write_key_file
from worker.db import connect, database_url
from worker.delivery import WorkerOptions, run_worker
from worker.outbox import EmailRequest, enqueue
from worker.senders import SenderSpec, add_sender
from worker.sink import RefuseShare, start_sink
from worker.stats import queue_stats

DEMO_PEOPLE = [
    ("ada", "Ada Lovelace"),
    ("grace", "Grace Hopper"),
    ("alan", "Alan Turing"),
    ("edsger", "Edsger Dijkstra"),
    ("barbara", "Barbara Liskov"),
    ("donald", "Donald Knuth"),
    ("margaret", "Margaret Hamilton"),
    ("ken", "Ken Thompson"),
]


def _ensure_senders(conn: psycopg.Connection[dict[str, Any]], box: SecretBox, port: int) -> None:
    existing = {
        str(row["name"]) for row in conn.execute("SELECT name FROM mailroom.sender_accounts").fetchall()
    }
    demo = [
        SenderSpec(
            "demo-primary", "noreply@demo.example.com", "127.0.0.1", port, "Mailroom Demo", "none", None, 2000
        ),
        SenderSpec(
            "demo-low-limit", "hello@demo.example.com", "127.0.0.1", port, "Mailroom Demo", "none", None, 25
        ),
    ]
    for spec in demo:
        if spec.name not in existing:
            add_sender(conn, spec, None, box)
        else:
            conn.execute(
                "UPDATE mailroom.sender_accounts SET smtp_port = %s WHERE name = %s", (port, spec.name)
            )


def _enqueue_demo_mail(conn: psycopg.Connection[Any], settings: Settings, round_: int) -> int:
    count = 0
    for login, name in DEMO_PEOPLE:
        data = {
            "login": login,
            "code": f"{(round_ * 7919 + count) % 100000:05d}",
            "expires_at": "in 15 minutes",
            "link": f"{settings.base_url}/activate/{login}",
        }
        enqueue(
            conn,
            EmailRequest(
                to=f"{login}@example.com",
                to_name=name,
                template="activation",
                data=data,
                idempotency_key=f"demo-activation-{round_}-{login}",
            ),
            settings=settings,
        )
        count += 1
    return count


def run_demo(settings: Settings) -> int:
    """Start everything the demo needs, show what is queued, and keep the local SMTP server up until Ctrl-C."""
    key = settings.secret_key or write_key_file(key_file(settings))
    box = SecretBox(key)
    print(f"Mailroom demo in {settings.home}")
    url = database_url(settings)
    print(f"  PostgreSQL: {url}")
    sink = start_sink(
        port=0,
        maildir=str(settings.home / "maildir"),
        refuse_share=RefuseShare(temporary=0.1, permanent=0.05),
    )
    print(f"  local SMTP server: 127.0.0.1:{sink.port} (Maildir {settings.home / 'maildir'})")
    try:
        with connect(url) as conn:
            _ensure_senders(conn, box, sink.port)
            added = _enqueue_demo_mail(conn, settings, 0)
            conn.commit()
        print(f"  enqueued {added} demo emails; delivering them with a worker")
        options = WorkerOptions(concurrency=2, drain=True, poll_seconds=0.5)
        sent = asyncio.run(run_worker(url, replace(settings, retry_base_seconds=1.0), options))
        with connect(url) as conn:
            stats = queue_stats(conn)
        print(f"  worker sent {sent}; the local SMTP server holds {len(sink.messages)} message(s)")
        print("  queue: " + "  ".join(f"{k} {v}" for k, v in stats["queue"].items()))
        for s in stats["senders"]:
            print(f"  sender {s['name']}: {s['status']}, {s['sent_today']}/{s['limit_today']} today")
        if not sys.stdin.isatty():
            return 0
        print("Running; press Ctrl-C to stop.")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                signal.pause()
    finally:
        sink.stop()
    return 0
