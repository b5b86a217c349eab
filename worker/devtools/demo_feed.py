"""The demo's activity: what applications and outside systems would do, fed into each producer.

A source does one realistic thing in its own transaction (an application creates an account, a shop
sends an order event, ...) and says what it did. The producers inside the worker then turn it into
email, exactly as in production.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from worker.core.config import Settings
from worker.core.db import connect
from worker.core.failover import database_unavailable
from worker.core.outbox import EmailRequest, enqueue

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


@dataclass(frozen=True)
class Person:
    """A made-up person with an address no other demo person has in this database."""

    first: str
    last: str
    email: str
    login: str


# A transaction id of the database: never given twice in one PostgreSQL cluster (64 bits, with its epoch).
RUN_NUMBER = "SELECT pg_current_xact_id()::text AS run"


class Names:
    """The endings of one feed's names (addresses, document ids): its run's number and a serial.

    The run's number comes from the database, so a feed never repeats a name an earlier run (another
    process, the same seed) left in it: a document id taken twice is refused ("already exists")."""

    def __init__(self, run: str) -> None:
        self.run = run
        self._serial = itertools.count(1)

    @classmethod
    def from_database(cls, conn: psycopg.Connection[Any]) -> Names:
        """Names for a new run in the database `conn` is connected to."""
        row = conn.execute(RUN_NUMBER).fetchone()
        assert row is not None
        return cls(str(row["run"]))

    def next(self) -> str:
        """A new ending, like `7301-12`."""
        return f"{self.run}-{next(self._serial)}"


@dataclass(frozen=True)
class Turn:
    """What a source acts with: its transaction's connection, the settings, the feed's chance and names."""

    conn: psycopg.Connection[Any]
    settings: Settings
    rng: random.Random
    names: Names
    first_round: bool = False

    def person(self) -> Person:
        """A new demo person."""
        first, last = self.rng.choice(FIRST), self.rng.choice(LAST)
        login = f"{first.lower()}.{last.lower()}.{self.names.next()}"
        return Person(first, last, f"{login}@{self.rng.choice(DOMAINS)}", login)


def app_receipt(turn: Turn) -> str:
    """An application enqueues a receipt inside its own transaction (no producer involved)."""
    who = turn.person()
    enqueue(
        turn.conn,
        EmailRequest(
            to=who.email,
            to_name=f"{who.first} {who.last}",
            subject=f"Your receipt for invoice {turn.rng.randint(10000, 99999)}",
            text=f"Hello {who.first},\n\nThank you for your payment.\n",
        ),
        settings=turn.settings,
    )
    return "receipt"


NEWSLETTER_HTML = """<html><body><p>Hello {first},</p>
<p>Our <a href="https://shop.example.com/winter-sale">winter sale</a> starts today, and the
<a href="https://blog.example.com/how-we-pack">blog</a> shows how we pack your orders.</p>
</body></html>"""


def newsletter(turn: Turn) -> str:
    """Marketing sends a campaign email: tracked opens and clicks, one-click unsubscribe headers."""
    who = turn.person()
    # Campaign email needs a physical postal address in its footer (CAN-SPAM): the demo shop's.
    turn.conn.execute(
        "INSERT INTO mailroom.campaigns (campaign_id, postal_address) VALUES ('winter-sale', %s)"
        " ON CONFLICT (campaign_id) DO NOTHING",
        ("Demo Shop Ltd, 1 Example Street, Springfield",),
    )
    enqueue(
        turn.conn,
        EmailRequest(
            to=who.email,
            to_name=f"{who.first} {who.last}",
            subject="Winter sale: 20% off everything on your desk",
            text=f"Hello {who.first},\n\nOur winter sale starts today: https://shop.example.com/winter-sale\n",
            html=NEWSLETTER_HTML.format(first=who.first),
            campaign_id="winter-sale",
        ),
        settings=turn.settings,
    )
    return "newsletter"


RECENT_TRACKED = """
SELECT e.tracking_token, e.unsubscribe_token,
       (SELECT l.token FROM mailroom.tracked_links l WHERE l.email_id = e.id ORDER BY l.position LIMIT 1) AS link
FROM mailroom.email_queue e
WHERE e.status = 'sent' AND e.campaign_id = 'winter-sale' AND e.sent_at > now() - interval '1 hour'
ORDER BY e.sent_at DESC LIMIT 20
"""


def readers(turn: Turn) -> str:
    """Recipients of the newsletter open it, click, and now and then unsubscribe, through the tracker."""
    import urllib.error
    import urllib.request

    from worker.core.links import CLICK_PATH, OPEN_PATH, UNSUBSCRIBE_PATH

    rows = turn.conn.execute(RECENT_TRACKED).fetchall()
    if not rows:
        return NOTHING_TO_READ
    row = turn.rng.choice(rows)
    roll = turn.rng.random()
    if roll < 0.05 and row["unsubscribe_token"] is not None:
        path, data, what = (
            UNSUBSCRIBE_PATH.format(token=row["unsubscribe_token"]),
            b"List-Unsubscribe=One-Click",
            "unsubscribe",
        )
    elif roll < 0.35 and row["link"] is not None:
        path, data, what = CLICK_PATH.format(token=row["link"]), None, "click"
    elif row["tracking_token"] is not None:
        path, data, what = OPEN_PATH.format(token=row["tracking_token"]), None, "open"
    else:
        return UNTRACKED
    # The demo's own tracker on loopback (settings.base_url is checked to be http(s) before any use).
    url = turn.settings.base_url + path
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")  # noqa: S310

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # a click answers with a redirect to a site that does not exist: do not follow it

    opener = urllib.request.build_opener(_NoRedirect)
    try:
        opener.open(request, timeout=2).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 302:
            raise ValueError(f"tracker answered {exc.code} to a {what}") from None
    except OSError as exc:
        raise ValueError(f"tracker unreachable: {exc}") from None
    return what


def lifecycle_signup(turn: Turn) -> str:
    """An application provisions an account; its activation token is created in the same transaction."""
    who = turn.person()
    turn.conn.execute(
        "INSERT INTO mailroom.accounts (email, login, locale) VALUES (%s, %s, %s)",
        (who.email, who.login, turn.rng.choice(["en", "en", "fr"])),
    )
    return "signup"


PRODUCTS = [
    ("Mechanical keyboard", "89.00"),
    ("USB-C cable", "9.50"),
    ("Monitor arm", "54.90"),
    ("Notebook, dotted", "12.00"),
    ("Desk lamp", "39.00"),
    ("Headphones", "129.00"),
]


def order_events(turn: Turn) -> str:
    """A shop publishes an order event; now and then the same event arrives twice (at-least-once delivery)."""
    from worker.producers.inbox import ingest_event

    rng = turn.rng
    who = turn.person()
    number = f"{rng.randint(100000, 999999)}"
    lines = [(name, price, rng.randint(1, 2)) for name, price in rng.sample(PRODUCTS, rng.randint(1, 3))]
    items = [{"name": name, "quantity": qty, "unit_price": price} for name, price, qty in lines]
    total = sum(float(price) * qty for _, price, qty in lines)
    kind = rng.choice(["order_placed", "order_placed", "order_completed", "order_cancelled"])
    payload = {
        "customer_email": who.email,
        "customer_name": f"{who.first} {who.last}",
        "order_number": number,
        "items": items,
        "total": f"{total:.2f}",
        "currency": "EUR",
        "locale": rng.choice(["en", "en", "fr"]),
    }
    message_id = f"shop-{number}-{kind}"
    ingest_event(turn.conn, message_id, "shop", kind, payload, settings=turn.settings)
    if rng.random() < 0.2:  # a replay: no second email
        ingest_event(turn.conn, message_id, "shop", kind, payload, settings=turn.settings)
    return "order event"


UNSIGNED_DOCUMENT = """
SELECT d.doc_id FROM mailroom.documents d WHERE d.doc_id LIKE 'demo-%%'
  AND EXISTS (SELECT 1 FROM mailroom.expected_signers e WHERE e.doc_id = d.doc_id
    AND NOT EXISTS (SELECT 1 FROM mailroom.signatures s WHERE s.doc_id = e.doc_id AND s.signer_email = e.email))
ORDER BY random() LIMIT 1
"""
MISSING_SIGNER = """
SELECT e.email FROM mailroom.expected_signers e WHERE e.doc_id = %s AND NOT EXISTS
  (SELECT 1 FROM mailroom.signatures s WHERE s.doc_id = e.doc_id AND s.signer_email = e.email)
ORDER BY random() LIMIT 1
"""


def signature_round(turn: Turn) -> str:
    """Compliance publishes a policy to acknowledge, people sign it, and reminders go to the rest."""
    from worker.producers.documents.reminders import send_reminders
    from worker.producers.documents.signatures import sign_document

    row = turn.conn.execute(UNSIGNED_DOCUMENT).fetchone()
    if row is None or turn.rng.random() < 0.15:
        return new_document(turn)
    doc_id = str(row["doc_id"])
    missing = turn.conn.execute(MISSING_SIGNER, (doc_id,)).fetchone()
    if missing is not None and turn.rng.random() < 0.6:
        sign_document(turn.conn, doc_id, str(missing["email"]), settings=turn.settings)
        return "signature"
    send_reminders(turn.conn, doc_id, settings=turn.settings)
    return "reminder run"


def new_document(turn: Turn) -> str:
    """Compliance publishes a policy for four to nine people to acknowledge (each is sent a request)."""
    from worker.producers.documents.records import add_document, expect_signer

    rng = turn.rng
    kind = rng.choice(["security", "privacy", "travel", "expenses"])
    doc_id = f"demo-{kind}-policy-{turn.names.next()}"
    add_document(
        turn.conn, doc_id, title=f"{kind.title()} policy", url=f"https://intranet.example.com/{doc_id}"
    )
    for _ in range(rng.randint(4, 9)):
        who = turn.person()
        expect_signer(
            turn.conn,
            doc_id,
            who.email,
            name=f"{who.first} {who.last}",
            locale=rng.choice(["en", "fr", "es", "de", "it"]),
            settings=turn.settings,
        )
    return "document"


ZONES = [
    "America/New_York",
    "Europe/London",
    "Europe/Paris",
    "Asia/Kathmandu",
    "Asia/Tokyo",
    "Australia/Lord_Howe",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
    "America/Sao_Paulo",
]


def birthdays(turn: Turn) -> str:
    """HR adds a person whose birthday is today, or in the next few days, in their own time zone.

    Today's is in a zone where it is already past the birthday time locally: the email is due at once
    (the local day has not ended; the zones span every hour, so there is always one). On a later day it
    waits for that morning, and the console's Schedule shows it coming. The first round's person always
    has theirs today, so every run shows birthday email going out.
    """
    from zoneinfo import ZoneInfo

    from worker.producers.birthdays import add_person, send_time

    rng = turn.rng
    who = turn.person()
    now = datetime.now(UTC)
    days = 0 if turn.first_round else rng.choice([0, 0, 0, 1, 2])
    past = [z for z in ZONES if now.astimezone(ZoneInfo(z)).time() >= send_time(turn.settings)]
    zone = rng.choice(past if days == 0 and past else ZONES)
    day = now.astimezone(ZoneInfo(zone)).date() + timedelta(days=days)
    years = rng.randint(20, 60)
    born = (
        day.replace(year=day.year - years)
        if (day.month, day.day) != (2, 29)
        else day - timedelta(days=365 * years)
    )
    add_person(
        turn.conn,
        email=who.email,
        first_name=who.first,
        last_name=who.last,
        date_of_birth=born,
        time_zone=zone,
        locale=rng.choice(["en", "en", "fr"]),
        settings=turn.settings,
    )
    return "person"


Source = Callable[[Turn], str]

SOURCES: tuple[Source, ...] = (
    app_receipt,
    lifecycle_signup,
    birthdays,
    order_events,
    signature_round,
    newsletter,
    readers,
    readers,
)

# What a source did, as the summary counts it, where the plural is not the singular and an "s".
NOTHING_TO_READ = "reader with nothing to read yet"
UNTRACKED = "reader of an untracked email"
PLURALS = {
    "person": "people",
    NOTHING_TO_READ: "readers with nothing to read yet",
    UNTRACKED: "readers of untracked email",
}


def counted(n: int, what: str) -> str:
    """`1 receipt`, `2 receipts`, `3 people`."""
    return f"{n} {what if n == 1 else PLURALS.get(what, what + 's')}"


class Feed:
    """Runs rounds of sources against the database until stopped."""

    def __init__(self, url: str, settings: Settings, rng: random.Random, sources: Sequence[Source]) -> None:
        self.url = url
        self.settings = settings
        self.rng = rng
        self.sources = tuple(sources)
        self.done: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.rounds = 0
        self._names: Names | None = None
        self._stop = threading.Event()

    def round(self) -> None:
        """Run every source once, each in its own transaction; a failing source is counted, not fatal."""
        with connect(self.url) as conn:
            if self._names is None:
                self._names = Names.from_database(conn)
            turn = Turn(conn, self.settings, self.rng, self._names, first_round=self.rounds == 0)
            for source in self.sources:
                try:
                    with conn.transaction():
                        self.done[source(turn)] += 1
                except (psycopg.Error, ValueError) as exc:
                    self.errors[f"{source.__name__}: {exc}"] += 1
            conn.commit()
        self.rounds += 1

    def run(self, interval: float) -> None:
        """Run rounds every `interval` seconds until `stop()`."""
        while not self._stop.is_set():
            # The database may be restarting, or going away with the demo: try again next round
            # (unavailable as every Mailroom process judges it: `worker.core.failover`).
            try:
                self.round()
            except psycopg.Error as exc:
                if not database_unavailable(exc):
                    raise
            self._stop.wait(interval)

    def stop(self) -> None:
        """Stop after the current round."""
        self._stop.set()

    def summary(self) -> str:
        """What the feed did so far, e.g. `12 receipts, 12 signups, 1 person`."""
        text = ", ".join(counted(n, what) for what, n in sorted(self.done.items()))
        if self.errors:
            text += f" ({sum(self.errors.values())} refused: {next(iter(self.errors))})"
        return text
