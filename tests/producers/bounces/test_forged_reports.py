"""The attacker who received one email: forged complaints and bounces through the real doors (SMTP to
the receiver, `mailroom bounces ingest`, HTTP to the tracker) act on nobody else's mail."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import aiohttp
import psycopg
import pytest

from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_SECRET, load
from tests.producers.bounces.receivers import ReceiverFactory, send_report
from tests.tracking import running_tracker
from tests.worker.helpers import add_sender, run_until_drained
from worker.cli.main import main
from worker.core.config import Settings
from worker.core.message import message_id_for
from worker.core.outbox import EmailRequest, enqueue
from worker.devtools.sink import RunningSink

ATTACKER = "attacker@example.net"
CUSTOMERS = [f"customer{i}@example.com" for i in range(10)]
ARF_MESSAGE_ID = b"8787KJKJ3K4J3K4J3K4J3.mail@example.net"


@pytest.fixture
def verp(settings: Settings) -> Settings:
    """Settings of a deployment with a bounce domain; the receiver checks tokens with the same key."""
    return replace(
        settings, secret_key=FIXTURE_SECRET, bounce_domain=BOUNCE_DOMAIN, base_url="https://t.example.org"
    )


def _complaint(message_id: str, about: str, return_path: str | None = None) -> bytes:
    """An ARF complaint about `about` naming `message_id` as the original; with `return_path`, the
    returned original's headers carry it (as a mailbox provider's feedback loop returns them)."""
    raw = load("rfc5965-optional-fields.eml").replace(ARF_MESSAGE_ID, message_id.strip("<>").encode())
    if return_path is not None:
        returned = f"Return-Path: <{return_path}>\nFrom: <somespammer@example.net>\nReceived:"
        raw = raw.replace(b"From: <somespammer@example.net>\nReceived:", returned.encode())
    return raw.replace(b"user@example.com", about.encode())


def _listed(db_url: str) -> list[tuple[str, str]]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT email, bounce_type FROM mailroom.bounce_list ORDER BY email").fetchall()
    return [(str(e), str(k)) for e, k in rows]


def _forgeries(db_url: str, own_message_id: str, ids: list[int], from_email: str) -> list[str]:
    """What a recipient can write for its neighbours: its own Message-ID with each neighbour's id in
    place of its own, and the `<id.stamp@domain>` shape Message-IDs had (every email of one
    transaction shared the stamp)."""
    local, _, domain = own_message_id.strip("<>").partition("@")
    _own, _, rest = local.partition(".")
    with psycopg.connect(db_url) as conn:
        created = {
            i: c for i, c in conn.execute("SELECT id, created_at FROM mailroom.email_queue").fetchall()
        }
    return [f"<{i}.{rest}@{domain}>" for i in ids] + [message_id_for(i, created[i], from_email) for i in ids]


async def _deliver_to_all(db_url: str, verp: Settings, smtp_sink: RunningSink) -> dict[str, int]:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn, conn.transaction():  # one transaction: one stamp for all
        ids = {
            to: enqueue(conn, EmailRequest(to=to, subject="Receipt", text="Thanks"), settings=verp)
            for to in [ATTACKER, *CUSTOMERS]
        }
    assert await run_until_drained(db_url, verp) == len(ids)
    return ids


async def test_forged_complaints_by_guessed_message_id_over_smtp_suppress_nobody(
    db_url: str, verp: Settings, smtp_sink: RunningSink, receiver: ReceiverFactory
) -> None:
    bounces = await receiver(bounce_domain=BOUNCE_DOMAIN)
    ids = await _deliver_to_all(db_url, verp, smtp_sink)
    [own] = [m for m in smtp_sink.messages if m.rcpt_tos == (ATTACKER,)]
    neighbours = [ids[c] for c in CUSTOMERS]
    replies = set()
    for i, forged in enumerate(
        _forgeries(db_url, str(own.message["Message-ID"]), neighbours, "sender@example.org")
    ):
        about = CUSTOMERS[i % len(CUSTOMERS)]
        replies.add(await send_report(bounces.port, _complaint(forged, about), f"abuse@{BOUNCE_DOMAIN}"))
    # The attacker's own, genuine complaint (its returned headers carry its return path) is taken
    # too, and answered exactly like every forgery.
    genuine = _complaint(str(own.message["Message-ID"]), ATTACKER, own.mail_from)
    replies.add(await send_report(bounces.port, genuine, f"abuse@{BOUNCE_DOMAIN}"))
    assert len(replies) == 1 and next(iter(replies))[0] == 250
    assert _listed(db_url) == [(ATTACKER, "complaint")]
    # A password reset to a customer the attacker named goes out.
    with psycopg.connect(db_url) as conn:
        reset = enqueue(
            conn, EmailRequest(to=CUSTOMERS[0], subject="Reset", text="Code 123456"), settings=verp
        )
    assert await run_until_drained(db_url, verp) == 1
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT status FROM mailroom.email_queue WHERE id = %s", (reset,)).fetchone() == (
            "sent",
        )


async def test_forged_complaints_through_bounces_ingest_suppress_nobody(
    db_url: str, verp: Settings, smtp_sink: RunningSink, cli_env: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("MAILROOM_SECRET_KEY", FIXTURE_SECRET)
    ids = await _deliver_to_all(db_url, verp, smtp_sink)
    [own] = [m for m in smtp_sink.messages if m.rcpt_tos == (ATTACKER,)]
    forgeries = _forgeries(
        db_url, str(own.message["Message-ID"]), [ids[c] for c in CUSTOMERS], "sender@example.org"
    )
    for i, forged in enumerate(forgeries):
        path = tmp_path / f"arf{i}.eml"
        path.write_bytes(_complaint(forged, CUSTOMERS[i % len(CUSTOMERS)]))
        assert main(["bounces", "ingest", str(path)]) == 0
    assert _listed(db_url) == []


async def test_a_cc_recipient_acts_for_itself_only(
    db_url: str, verp: Settings, smtp_sink: RunningSink, receiver: ReceiverFactory
) -> None:
    bounces = await receiver(bounce_domain=BOUNCE_DOMAIN)
    add_sender(db_url, smtp_sink.port)
    victim = CUSTOMERS[0]
    with psycopg.connect(db_url) as conn:
        email_id = enqueue(
            conn,
            EmailRequest(to=victim, cc=[ATTACKER], subject="News", text="Hello", campaign_id="news"),
            settings=verp,
        )
    assert await run_until_drained(db_url, verp) == 1
    copies = {m.rcpt_tos[0]: m for m in smtp_sink.messages}
    own = copies[ATTACKER]
    assert own.mail_from != copies[victim].mail_from
    assert own.message["Message-ID"] != copies[victim].message["Message-ID"]
    # A DSN about the victim to the attacker's own return path, and a complaint naming the victim with
    # the attacker's own Message-ID: both answered like any report, neither acts.
    dsn = re.sub(
        rb"bounces\+[0-9a-z-]+@bounces\.example", own.mail_from.encode(), load("postfix-unknown-user.eml")
    )
    dsn = dsn.replace(b"no-such-user@mta.example.net", victim.encode())
    first = await send_report(bounces.port, dsn, own.mail_from)
    second = await send_report(
        bounces.port, _complaint(str(own.message["Message-ID"]), victim), f"abuse@{BOUNCE_DOMAIN}"
    )
    assert first == second and first[0] == 250
    assert _listed(db_url) == []
    with psycopg.connect(db_url) as conn:  # both kept, counted against the client that sent them
        kept = conn.execute("SELECT client FROM mailroom.bounce_quarantine").fetchall()
    assert kept == [("127.0.0.1",), ("127.0.0.1",)]
    # Unsubscribe: the attacker's link with its MAC stripped names nobody; with it, the attacker only.
    link = re.search(r"<https://t\.example\.org(/u/[^>]+)>", str(own.message["List-Unsubscribe"]))
    assert link is not None and "." in link.group(1)
    body = {"List-Unsubscribe": "One-Click"}
    async with running_tracker(db_url, verp) as server, aiohttp.ClientSession() as http:
        stripped = link.group(1).split(".")[0]
        async with http.post(server.make_url(stripped), data=body) as resp:
            assert resp.status == 404
        async with http.post(server.make_url(link.group(1)), data=body) as resp:
            assert resp.status == 200
    with psycopg.connect(db_url) as conn:
        listed = conn.execute("SELECT email, email_id FROM mailroom.unsubscribe_list").fetchall()
    assert listed == [(ATTACKER, email_id)]
    # The To recipient replies to all: the Cc now holds the To's Message-ID. A complaint naming it
    # alone, with no return-path token, is not trusted for an email sent from a VERP return path.
    leaked = str(copies[victim].message["Message-ID"])
    assert await send_report(bounces.port, _complaint(leaked, victim), f"abuse@{BOUNCE_DOMAIN}") == first
    assert _listed(db_url) == []
    # The Cc's own hard bounce lists the Cc, and the email the To recipient got stays `sent`.
    own_dsn = dsn.replace(victim.encode(), ATTACKER.encode())
    assert await send_report(bounces.port, own_dsn, own.mail_from) == first
    assert _listed(db_url) == [(ATTACKER, "hard")]
    with psycopg.connect(db_url) as conn:
        status = conn.execute("SELECT status FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
    assert status == ("sent",)
