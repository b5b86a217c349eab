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

from worker.core.config import Settings
from worker.core.db import connect
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
        ),
        settings=settings,
    )
    return "receipt"


NEWSLETTER_HTML = """<html><body><p>Hello {first},</p>
<p>Our <a href="https://shop.example.com/winter-sale">winter sale</a> starts today, and the
<a href="https://blog.example.com/how-we-pack">blog</a> shows how we pack your orders.</p>
</body></html>"""


def newsletter(conn: psycopg.Connection[Any], settings: Settings, rng: random.Random) -> str:
    """Marketing sends a campaign email: tracked opens and clicks, one-click unsubscribe headers."""
    who = person(rng)
    # Campaign email needs a physical postal address in its footer (CAN-SPAM): the demo shop's.
    conn.execute(
        "INSERT INTO mailroom.campaigns (campaign_id, postal_address) VALUES ('winter-sale', %s)"
        " ON CONFLICT (campaign_id) DO NOTHING",
        ("Demo Shop Ltd, 1 Example Street, Springfield",),
    )
    enqueue(
        conn,
        EmailRequest(
            to=who.email,
            to_name=f"{who.first} {who.last}",
            subject="Winter sale: 20% off everything on your desk",
            text=f"Hello {who.first},\n\nOur winter sale starts today: https://shop.example.com/winter-sale\n",
            html=NEWSLETTER_HTML.format(first=who.first),
            campaign_id="winter-sale",
        ),
        settings=settings,
    )
    return "newsletter"


RECENT_TRACKED = """
SELECT e.tracking_token, e.unsubscribe_token,
       (SELECT l.token FROM mailroom.tracked_links l WHERE l.email_id = e.id ORDER BY l.position LIMIT 1) AS link
FROM mailroom.email_queue e
WHERE e.status = 'sent' AND e.campaign_id = 'winter-sale' AND e.sent_at > now() - interval '1 hour'
ORDER BY e.sent_at DESC LIMIT 20
"""


def readers(conn: psycopg.Connection[Any], settings: Settings, rng: random.Random) -> str:
    """Recipients of the newsletter open it, click, and now and then unsubscribe, through the tracker."""
    import urllib.error
    import urllib.request

    from worker.core.links import CLICK_PATH, OPEN_PATH, UNSUBSCRIBE_PATH

    rows = conn.execute(RECENT_TRACKED).fetchall()
    if not rows:
        return "reader (nothing sent yet)"
    row = rng.choice(rows)
    roll = rng.random()
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
        return "reader (untracked)"
    # The demo's own tracker on loopback (settings.base_url is checked to be http(s) before any use).
    url = settings.base_url + path
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


def lifecycle_signup(conn: psycopg.Connection[Any], settings: Settings, rng: random.Random) -> str:
    """An application provisions an account; its activation token is created in the same transaction."""
    who = person(rng)
    conn.execute(
        "INSERT INTO mailroom.accounts (email, login, locale) VALUES (%s, %s, %s)",
        (who.email, who.login, rng.choice(["en", "en", "fr"])),
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


def order_events(conn: psycopg.Connection[Any], settings: Settings, rng: random.Random) -> str:
    """A shop publishes an order event; now and then the same event arrives twice (at-least-once delivery)."""
    from worker.producers.inbox import ingest_event

    who = person(rng)
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
    ingest_event(conn, message_id, "shop", kind, payload, settings=settings)
    if rng.random() < 0.2:
        ingest_event(conn, message_id, "shop", kind, payload, settings=settings)  # a replay: no second email
    return "order event"


def signature_round(conn: psycopg.Connection[Any], settings: Settings, rng: random.Random) -> str:
    """Compliance publishes a policy to acknowledge, people sign it, and reminders go to the rest."""
    from worker.producers.documents.records import add_document, expect_signer
    from worker.producers.documents.reminders import send_reminders
    from worker.producers.documents.signatures import sign_document

    row = conn.execute(
        "SELECT d.doc_id FROM mailroom.documents d WHERE d.doc_id LIKE 'demo-%%'"
        " AND EXISTS (SELECT 1 FROM mailroom.expected_signers e WHERE e.doc_id = d.doc_id"
        "   AND NOT EXISTS (SELECT 1 FROM mailroom.signatures s WHERE s.doc_id = e.doc_id AND s.signer_email = e.email))"
        " ORDER BY random() LIMIT 1"
    ).fetchone()
    if row is None or rng.random() < 0.15:
        doc_id = f"demo-{rng.choice(['security', 'privacy', 'travel', 'expenses'])}-policy-{next(_serial)}"
        add_document(
            conn,
            doc_id,
            title=f"{doc_id.split('-')[1].title()} policy",
            url=f"https://intranet.example.com/{doc_id}",
        )
        for _ in range(rng.randint(4, 9)):
            who = person(rng)
            expect_signer(
                conn,
                doc_id,
                who.email,
                name=f"{who.first} {who.last}",
                locale=rng.choice(["en", "fr", "es", "de", "it"]),
                settings=settings,
            )
        return "document"
    doc_id = str(row["doc_id"])
    missing = conn.execute(
        "SELECT e.email FROM mailroom.expected_signers e WHERE e.doc_id = %s AND NOT EXISTS"
        " (SELECT 1 FROM mailroom.signatures s WHERE s.doc_id = e.doc_id AND s.signer_email = e.email)"
        " ORDER BY random() LIMIT 1",
        (doc_id,),
    ).fetchone()
    if missing is not None and rng.random() < 0.6:
        sign_document(conn, doc_id, str(missing["email"]), settings=settings)
        return "signature"
    send_reminders(conn, doc_id, settings=settings)
    return "reminder run"


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


def birthdays(conn: psycopg.Connection[Any], settings: Settings, rng: random.Random) -> str:
    """HR adds a person whose birthday is today, or in the next few days, in their own time zone.

    Where it is already past the birthday time locally, the email is due at once (the local day has not
    ended); elsewhere it waits for the morning, and the console's Schedule shows it coming.
    """
    from datetime import UTC, datetime, timedelta
    from zoneinfo import ZoneInfo

    from worker.producers.birthdays import add_person

    who = person(rng)
    zone = rng.choice(ZONES)
    local_today = datetime.now(UTC).astimezone(ZoneInfo(zone)).date()
    day = local_today + timedelta(days=rng.choice([0, 0, 0, 1, 2]))
    years = rng.randint(20, 60)
    born = (
        day.replace(year=day.year - years)
        if (day.month, day.day) != (2, 29)
        else day - timedelta(days=365 * years)
    )
    add_person(
        conn,
        email=who.email,
        first_name=who.first,
        last_name=who.last,
        date_of_birth=born,
        time_zone=zone,
        locale=rng.choice(["en", "en", "fr"]),
        settings=settings,
    )
    return "person"


Source = Callable[[psycopg.Connection[Any], Settings, random.Random], str]

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

BACKLOG = """
SELECT
    (SELECT count(*) FROM mailroom.email_queue
      WHERE (status = 'pending' AND retry_count = 0 AND scheduled_for <= now()) OR status = 'assigned')
  + (SELECT count(*) FROM mailroom.tokens
      WHERE mailed_at IS NULL AND mail_skipped_reason IS NULL AND expires_at > now())
  + (SELECT count(*) FROM mailroom.events WHERE status IN ('pending', 'processing') AND due_at <= now()) AS backlog
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
