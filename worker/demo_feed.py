"""The demo's activity: what applications and outside systems would do, fed into each producer.

A source does one realistic thing in its own transaction (an application creates an account, a shop
sends an order event, ...) and says what it did. The producers inside the worker then turn it into
email, exactly as in production.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from worker.config import Settings
from worker.db import connect
from worker.outbox import EmailRequest, enqueue

FIRST = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Margaret", "Ken", "Frances", "Radia"]
LAST = [
    "Lovelace",
    "Hopper",
    "Turing",
    "Dijkstra",
    "Liskov",
    "Knuth",
    "Hamilton",
    "Thompson",
    "Allen",
    "Perlman",
]
DOMAINS = ["example.com", "example.org", "example.net"]

_serial = itertools.count(1)


@dataclass(frozen=True)
class Person:
    """A made-up person with a unique address for this run."""

    first: str
    last: str
    email: str
    login: str


def person(rng: random.Random) -> Person:
    """A new demo person; the address is unique within this process."""
    first, last = rng.choice(FIRST), rng.choice(LAST)
    n = f"{time.time_ns() % 10**9:09d}{next(_serial)}"
    login = f"{first.lower()}.{last.lower()}.{n}"
    return Person(first, last, f"{login}@{rng.choice(DOMAINS)}", login)


def app_receipt(conn: psycopg.Connection[Any], settings: Settings, rng: random.Random) -> str:
    """An application enqueues a receipt inside its own transaction (no producer involved)."""
    who = person(rng)
    enqueue(
        conn,
        EmailRequest(
            to=who.email,
            to_name=f"{who.first} {who.last}",
            subject=f"Your receipt for invoice {rng.randint(10000, 99999)}",
            text=f"Hello {who.first},\n\nThank you for your payment.\n",
            campaign_id=rng.choice([None, "receipts"]),
        ),
        settings=settings,
    )
    return "receipt"


def lifecycle_signup(conn: psycopg.Connection[Any], settings: Settings, rng: random.Random) -> str:
    """An application provisions an account; its activation token is created in the same transaction."""
    who = person(rng)
    conn.execute(
        "INSERT INTO mailroom.accounts (email, login, locale) VALUES (%s, %s, %s)",
        (who.email, who.login, rng.choice(["en", "en", "fr"])),
    )
    return "signup"


Source = Callable[[psycopg.Connection[Any], Settings, random.Random], str]

SOURCES: tuple[Source, ...] = (app_receipt, lifecycle_signup)

BACKLOG = """
SELECT
    (SELECT count(*) FROM mailroom.email_queue
      WHERE (status = 'pending' AND retry_count = 0 AND scheduled_for <= now()) OR status = 'assigned')
  + (SELECT count(*) FROM mailroom.tokens WHERE mailed_at IS NULL AND expires_at > now()) AS backlog
"""


class Feed:
    """Runs rounds of sources against the database until stopped."""

    def __init__(self, url: str, settings: Settings, rng: random.Random, sources: Sequence[Source]) -> None:
        self.url = url
        self.settings = settings
        self.rng = rng
        self.sources = tuple(sources)
        self.done: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()

    def round(self) -> None:
        """Run every source once, each in its own transaction; a failing source is counted, not fatal."""
        with connect(self.url) as conn:
            for source in self.sources:
                try:
                    with conn.transaction():
                        self.done[source(conn, self.settings, self.rng)] += 1
                except (psycopg.Error, ValueError) as exc:
                    self.errors[f"{source.__name__}: {exc}"] += 1
            conn.commit()

    def run(self, interval: float) -> None:
        """Run rounds every `interval` seconds until `stop()`."""
        while not self._stop.is_set():
            # The database may be restarting, or going away with the demo: try again next round.
            with contextlib.suppress(psycopg.OperationalError):
                self.round()
            self._stop.wait(interval)

    def stop(self) -> None:
        """Stop after the current round."""
        self._stop.set()

    def summary(self) -> str:
        """What the feed did so far, e.g. `12 signup, 12 receipt`."""
        text = ", ".join(f"{n} {what}" for what, n in sorted(self.done.items()))
        if self.errors:
            text += f" ({sum(self.errors.values())} refused: {next(iter(self.errors))})"
        return text

    def wait_until_idle(self, timeout: float) -> bool:
        """Wait until nothing the feed made is still waiting for the worker (retries later do not count)."""
        deadline = time.monotonic() + timeout
        with connect(self.url) as conn:
            while time.monotonic() < deadline:
                row = conn.execute(BACKLOG).fetchone()
                conn.commit()
                if row is not None and row["backlog"] == 0:
                    return True
                self._stop.wait(0.25)
        return False
