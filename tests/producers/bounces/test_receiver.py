"""The bounce receiver over real SMTP on 127.0.0.1: bounce domains only, size and rate limits, never down."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import psycopg

from tests.producers.bounces.corpus import (
    BOUNCE_DOMAIN,
    FIXTURE_KEY,
    FIXTURE_SECRET,
    load,
    names,
    readdress,
    sent_email,
)
from tests.producers.bounces.receivers import Clock, ReceiverFactory, send_report
from tests.worker.helpers import add_sender, run_until_drained
from worker.core.config import Settings
from worker.core.failover import DatabaseCircuit
from worker.core.outbox import EmailRequest, enqueue
from worker.core.return_path import parse_return_path, return_path
from worker.devtools.sink import RunningSink
from worker.engine.queue_sql import CLAIM
from worker.producers.bounces.receiver import (
    ACCEPTED,
    BounceHandler,
    BounceServer,
    RateLimiter,
    database_processor,
)

UNKNOWN = "no-such-user@mta.example.net"
NEUTRAL = ACCEPTED.removeprefix("250 ")  # the reply text to every message taken in, whatever its outcome


async def test_a_dsn_sent_to_the_return_path_bounces_the_email_and_later_email_is_suppressed_at_enqueue(
    db_url: str, receiver: ReceiverFactory
) -> None:
    server = await receiver()
    email = sent_email(db_url, UNKNOWN)
    to = return_path(email["id"], UNKNOWN, BOUNCE_DOMAIN, "bounces", FIXTURE_KEY)
    raw = readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY)
    assert await send_report(server.port, raw, to) == (250, NEUTRAL)
    with psycopg.connect(db_url) as conn:
        assert conn.execute(
            "SELECT status FROM mailroom.email_queue WHERE id = %s", (email["id"],)
        ).fetchone() == ("bounced",)
        next_id = enqueue(conn, EmailRequest(to=UNKNOWN, subject="Again", text="Hi"), settings=Settings())
        conn.commit()
        claimed = conn.execute(
            CLAIM,
            {
                "limit": 10,
                "lifetime": 86400.0,
                "ahead": 0.0,
                "expired": "expired",
                "own_expired": "expired",
                "stream": "transactional",
                "domains": [],
                "owner": "t",
                "token": "00000000-0000-0000-0000-000000000001",
                "lease": 60.0,
                "sender": None,
            },
        ).fetchall()
    # Stored suppressed at once, the caller told why; nothing for a worker to claim.
    assert next_id.suppression_reason == "on the bounce list (hard)"
    assert claimed == []


async def test_mail_for_any_other_domain_is_refused_as_relaying(receiver: ReceiverFactory) -> None:
    server = await receiver()
    code, message = await send_report(server.port, b"Subject: x\n\nhello\n", "someone@example.com")
    assert code == 550 and "5.7.1" in message
    code, _ = await send_report(server.port, b"Subject: x\n\nhello\n", "bounces@bounces.example.evil.test")
    assert code == 550
    assert server.handler.received == 0


async def test_a_message_over_the_size_limit_is_refused(receiver: ReceiverFactory) -> None:
    server = await receiver(max_bytes=2000)
    code, _ = await send_report(
        server.port, b"Subject: x\n\n" + b"a" * 5000 + b"\n", f"bounces@{BOUNCE_DOMAIN}"
    )
    assert code == 552
    assert server.handler.received == 0


async def test_a_client_over_its_rate_is_told_to_come_back_later(receiver: ReceiverFactory) -> None:
    clock = Clock()
    server = await receiver(per_minute=6, burst=2, clock=clock)
    to = f"bounces@{BOUNCE_DOMAIN}"
    assert [(await send_report(server.port, b"Subject: x\n\nhi\n", to))[0] for _ in range(3)] == [
        250,
        250,
        450,
    ]
    clock.now += 10.0  # one token back at six a minute
    assert (await send_report(server.port, b"Subject: y\n\nhi\n", to))[0] == 250


async def test_a_database_outage_answers_451_and_the_server_keeps_serving(
    db_url: str, receiver: ReceiverFactory
) -> None:
    down = await receiver(url="postgresql://127.0.0.1:1/nothing")
    code, message = await send_report(down.port, b"Subject: x\n\nhi\n", f"bounces@{BOUNCE_DOMAIN}")
    assert code == 451 and "4.3.0" in message
    code, _ = await send_report(down.port, b"Subject: x\n\nhi\n", f"bounces@{BOUNCE_DOMAIN}")
    assert code == 451


async def test_a_read_only_database_is_waited_for_not_tried_per_message_and_nothing_is_quarantined(
    db_url: str,
) -> None:
    # A primary demoted in a failover: every session of this database is read-only from now on.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET default_transaction_read_only = on')
    clock = Clock()
    tried: list[int] = []
    process = database_processor(db_url, FIXTURE_KEY)

    def counted(raw: bytes, recipients: list[str], client: str) -> object:
        tried.append(1)
        return process(raw, recipients, client)

    circuit = DatabaseCircuit("bounce-receiver", threshold=2, base_seconds=1.0, cap_seconds=4.0, clock=clock)
    handler = BounceHandler(
        counted, frozenset({BOUNCE_DOMAIN}), RateLimiter(600, 100, Clock()), circuit=circuit
    )  # type: ignore[arg-type]
    server = BounceServer(handler, "127.0.0.1", 0)
    await server.start()
    to, raw = f"bounces@{BOUNCE_DOMAIN}", b"Subject: x\n\nhi\n"
    try:
        codes = [(await send_report(server.port, raw, to))[0]]
        clock.now += 1.5
        codes.append((await send_report(server.port, raw, to))[0])  # two failures over more than a blip
        codes.append((await send_report(server.port, raw, to))[0])  # the circuit is open: not tried
        assert codes == [451, 451, 451] and len(tried) == 2 and circuit.opened
        with psycopg.connect(db_url, autocommit=True) as conn:  # the new primary takes writes
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f'ALTER DATABASE "{conn.info.dbname}" RESET default_transaction_read_only')
        clock.now += 1.5  # its wait is over: the next message is tried, and taken
        assert (await send_report(server.port, raw, to))[0] == 250
        assert len(tried) == 3 and not circuit.opened
    finally:
        await server.close()
    with psycopg.connect(db_url) as conn:  # the refusals were the database's state, not the message's
        assert conn.execute("SELECT count(*) FROM mailroom.bounce_quarantine").fetchone() == (1,)


async def test_mutated_reports_and_junk_never_stop_the_receiver(
    db_url: str, receiver: ReceiverFactory
) -> None:
    server = await receiver()
    email = sent_email(db_url, UNKNOWN)
    rng = random.Random(18)
    corpus = [readdress(load(name), email["id"], UNKNOWN, FIXTURE_KEY) for name in names()]
    for _ in range(25):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(data))
            data[at : at + rng.randint(0, 50)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
        code, _ = await send_report(server.port, bytes(data), f"bounces@{BOUNCE_DOMAIN}")
        assert code == 250
    assert server.handler.received == 25
    code, _ = await send_report(
        server.port,
        readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY),
        f"bounces@{BOUNCE_DOMAIN}",
    )
    assert code == 250


async def test_a_delivered_email_that_bounces_later_is_bounced_and_the_next_email_to_it_suppressed(
    db_url: str, settings: Settings, smtp_sink: RunningSink, receiver: ReceiverFactory
) -> None:
    settings = replace(settings, secret_key=FIXTURE_SECRET)  # the key the receiver checks Message-IDs with
    server = await receiver()
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        first = enqueue(conn, EmailRequest(to=UNKNOWN, subject="Welcome", text="Hi"), settings=settings)
    assert await run_until_drained(db_url, settings) == 1
    (delivered,) = smtp_sink.messages
    # The relay accepted it; later its DSN comes back naming the Message-ID the worker put on the wire.
    dsn = re.sub(rb"bounces\+[0-9a-z-]+@", b"bounces@", load("postfix-unknown-user.eml"))
    dsn = dsn.replace(b"<1.5f3c2a1b0c9d8@example.org>", str(delivered.message["Message-ID"]).encode())
    assert await send_report(server.port, dsn, f"bounces@{BOUNCE_DOMAIN}") == (250, NEUTRAL)
    with psycopg.connect(db_url) as conn:
        second = enqueue(conn, EmailRequest(to=UNKNOWN, subject="Again", text="Hi"), settings=settings)
    assert await run_until_drained(db_url, settings) == 0
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT id, status FROM mailroom.email_queue ORDER BY id").fetchall()
    assert rows == [(first, "bounced"), (second, "suppressed")]
    assert len(smtp_sink.messages) == 1


async def test_the_worker_sends_from_the_emails_return_path_and_its_dsn_bounces_exactly_that_email(
    db_url: str, settings: Settings, smtp_sink: RunningSink, receiver: ReceiverFactory
) -> None:
    verp = replace(settings, secret_key=FIXTURE_SECRET, bounce_domain=BOUNCE_DOMAIN)
    server = await receiver()
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        first = enqueue(conn, EmailRequest(to=UNKNOWN, subject="Welcome", text="Hi"), settings=verp)
        other = enqueue(
            conn, EmailRequest(to="fine@example.com", subject="Welcome", text="Hi"), settings=verp
        )
    assert await run_until_drained(db_url, verp) == 2
    by_recipient = {m.rcpt_tos[0]: m.mail_from for m in smtp_sink.messages}
    assert parse_return_path(by_recipient[UNKNOWN], FIXTURE_KEY) is not None
    assert by_recipient[UNKNOWN] != by_recipient["fine@example.com"]
    assert b"bounces+" not in b"".join(m.content for m in smtp_sink.messages)  # headers unchanged
    # The relay accepted it; later it returns a DSN to the envelope sender the worker used.
    dsn = re.sub(
        rb"bounces\+[0-9a-z-]+@bounces\.example",
        by_recipient[UNKNOWN].encode(),
        load("postfix-unknown-user.eml"),
    )
    assert await send_report(server.port, dsn, by_recipient[UNKNOWN]) == (250, NEUTRAL)
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT id, status FROM mailroom.email_queue ORDER BY id").fetchall()
    assert rows == [(first, "bounced"), (other, "sent")]


async def test_a_senders_own_bounce_domain_is_served_once_added_and_others_stay_refused(db_url: str) -> None:
    """Without --domain the receiver serves each sender account's bounce domain, one added while it runs
    too (after the domains' time to live); a database that cannot answer makes a 451, never a 550."""
    from worker.producers.bounces.receiver import SenderDomains, database_sender_domains

    clock = Clock()
    book = SenderDomains(database_sender_domains(db_url), ttl=30.0, clock=clock)
    handler = BounceHandler(database_processor(db_url, FIXTURE_KEY), frozenset(), RateLimiter(600, 100), book)
    server = BounceServer(handler, "127.0.0.1", 0)
    port = await server.start()
    try:
        email = sent_email(db_url, UNKNOWN)
        address = return_path(email["id"], UNKNOWN, "returns.example.net", "bounces", FIXTURE_KEY)
        raw = readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY)
        code, _ = await send_report(port, raw, address)
        assert code == 550  # no sender has that domain yet
        sender = add_sender(db_url, 25)
        with psycopg.connect(db_url) as conn:
            conn.execute(
                "UPDATE mailroom.sender_accounts SET bounce_domain = 'returns.example.net' WHERE id = %s",
                (sender,),
            )
        assert (await send_report(port, raw, address))[0] == 550  # read 0 s ago: still the old list
        clock.now = 31.0
        code, reply = await send_report(port, raw, address)
        assert (code, reply) == (250, NEUTRAL)
        with psycopg.connect(db_url) as conn:
            row = conn.execute(
                "SELECT status FROM mailroom.email_queue WHERE id = %s", (email["id"],)
            ).fetchone()
        assert row == ("bounced",)
        assert (await send_report(port, raw, "x@elsewhere.example"))[0] == 550
        # the database goes away: a domain it may know is deferred, not refused
        book.read = _unreachable
        clock.now = 62.0
        assert (await send_report(port, raw, "bounces+x@another.example.net"))[0] == 451
    finally:
        await server.close()


def _unreachable() -> frozenset[str]:
    raise psycopg.OperationalError("connection refused")
