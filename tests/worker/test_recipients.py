"""Many recipients: To list, Cc, Bcc and Reply-To through the worker, against the real database and SMTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import default
from typing import Any

import dkim as dkimpy
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fixtures_db import TEST_POSTAL_ADDRESS
from tests.scripted_smtp import ScriptedServer
from tests.worker.helpers import add_sender, run_until_drained, statuses
from worker.core.config import Settings
from worker.core.dkim import DkimKey, dns_record, normalise_private_key, sign_envelope
from worker.core.message import Envelope, build_message, check_row
from worker.core.outbox import EmailRequest, enqueue
from worker.core.validation import ValidationError
from worker.devtools.sink import RunningSink
from worker.devtools.sink_script import Accept, Drop
from worker.engine.smtp import SmtpAccount, SmtpConnection

A, B, C = "ann@example.com", "bob@example.com", "cat@example.com"


@pytest.fixture(scope="module")
def signing() -> tuple[DkimKey, Callable[..., bytes | None]]:
    """A DKIM key and the DNS lookup that publishes it."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = normalise_private_key(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    record = dns_record(pem).encode("ascii")

    def dns(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name == b"s1._domainkey.example.org." else None

    return DkimKey("example.org", "s1", pem), dns


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[dict[str, str]], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def make(script: dict[str, str]) -> ScriptedServer:
        server = ScriptedServer(script)
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


def enqueue_to(
    db_url: str,
    to: str,
    *,
    name: str | None = None,
    campaign_id: str | None = None,
    max_retries: int | None = None,
    **lists: list[str],
) -> int:
    """Enqueue one email through the API, then give it its recipients with plain SQL (as any writer may).

    Enqueued to a placeholder first: enqueueing to `to` would store it suppressed at once when `to` is
    suppressed, before the other recipients are there; the claim is what these tests exercise."""
    with psycopg.connect(db_url) as conn:
        email_id = enqueue(
            conn,
            EmailRequest(
                to="placeholder@example.net",
                to_name=name,
                subject="Hello all",
                text="Body",
                campaign_id=campaign_id,
                max_retries=max_retries,
            ),
            settings=Settings(database_url=db_url, postal_address=TEST_POSTAL_ADDRESS),
        )
        conn.execute(
            "UPDATE mailroom.email_queue SET recipient_email = %(to)s, to_extra = %(to_extra)s, cc = %(cc)s,"
            " bcc = %(bcc)s, reply_to = %(reply_to)s WHERE id = %(id)s",
            {"id": email_id, "to": to, **{k: lists.get(k) for k in ("to_extra", "cc", "bcc", "reply_to")}},
        )
    return email_id


def outcomes(db_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT recipient, kind, outcome, smtp_code, enhanced_code, reason"
            " FROM mailroom.recipient_outcomes ORDER BY id"
        ).fetchall()


def one_row(db_url: str, query: str) -> tuple[Any, ...]:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row


def _row(**fields: Any) -> dict[str, Any]:
    return {
        "id": 7,
        "created_at": datetime(2026, 11, 21, tzinfo=UTC),
        "recipient_email": A,
        "recipient_name": None,
        "subject": "Hi",
        "text_body": "Body",
        "html_body": None,
        "headers": {},
        **fields,
    }


# -- building ------------------------------------------------------------------------------------------


def test_headers_list_every_to_and_cc_and_reply_to_while_bcc_is_envelope_only() -> None:
    many = [f"person{i}@example.com" for i in range(12)]  # long enough to fold
    envelope = build_message(
        _row(recipient_name="Ann Ünïcode", to_extra=[B, *many], cc=[C], bcc=["hidden@example.net"],
             reply_to=["desk@example.org"]),
        "noreply@example.org",
    )  # fmt: skip
    assert all(len(line) <= 78 for line in envelope.content.split(b"\r\n\r\n")[0].split(b"\r\n"))
    parsed = BytesParser(policy=default).parsebytes(envelope.content)
    to = parsed["To"].addresses
    assert [a.addr_spec for a in to] == [A, B, *many]
    assert to[0].display_name == "Ann Ünïcode"
    assert [a.addr_spec for a in parsed["Cc"].addresses] == [C]
    assert [a.addr_spec for a in parsed["Reply-To"].addresses] == ["desk@example.org"]
    assert b"hidden" not in envelope.content and parsed["Bcc"] is None
    assert envelope.recipients == (A, B, *many, C, "hidden@example.net")
    assert envelope.recipient == A


def test_envelope_recipients_are_de_duplicated_case_insensitively_and_leave_out_the_dropped() -> None:
    envelope = build_message(
        _row(to_extra=[B, "ANN@example.com"], cc=["Bob@Example.com", C], bcc=[A, "cat@EXAMPLE.com"],
             dropped={A: "unsubscribed"}),
        "noreply@example.org",
    )  # fmt: skip
    assert envelope.recipients == (B, C)
    assert envelope.recipient == B
    # The message is what was stored: a suppressed recipient stays in the To header.
    assert BytesParser(policy=default).parsebytes(envelope.content)["To"].addresses[0].addr_spec == A


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("to_extra", ["bob@example.com", "no-at-sign"], "to_extra[2]: invalid email address"),
        ("cc", ["bob@example.com\r\nBcc: evil@example.net"], "cc[1]: control character"),
        ("bcc", [None], "bcc[1]: an email address is required"),
        ("reply_to", ["=?utf-8?q?a=0D=0A?=@example.com"], "reply_to[1]: encoded word decodes to control"),
        ("cc", "bob@example.com", "cc: must be a list of email addresses"),
    ],
)
def test_a_bad_address_in_any_list_is_refused_naming_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        build_message(_row(**{field: value}), "noreply@example.org")
    assert str(refused.value).startswith(message)


def test_a_reply_to_header_is_refused_beside_the_reply_to_list() -> None:
    with pytest.raises(ValidationError, match="set by Mailroom"):
        check_row(_row(reply_to=[B], headers={"reply-to": C}))


def test_reply_to_alone_adds_the_header_and_keeps_the_one_recipient_envelope() -> None:
    envelope = build_message(_row(reply_to=["desk@example.org", "desk2@example.org"]), "noreply@example.org")
    assert b"\r\nReply-To: desk@example.org, desk2@example.org\r\n" in envelope.content
    assert (envelope.recipient, envelope.recipients) == (A, ())


@pytest.mark.parametrize(
    ("cc", "old", "new"),
    [
        ([C], f"Cc: {C}".encode(), b"Cc: evil@example.net"),  # altered
        ([C], b"\r\n\r\n", b"\r\nCc: evil@example.net\r\n\r\n"),  # a second one added
        (None, b"\r\n\r\n", b"\r\nCc: evil@example.net\r\n\r\n"),  # added where there was none
    ],
)
def test_dkim_covers_cc_so_it_cannot_be_altered_or_added_in_transit(
    signing: tuple[DkimKey, Callable[..., bytes | None]], cc: list[str] | None, old: bytes, new: bytes
) -> None:
    key, dns = signing
    signed = sign_envelope(build_message(_row(cc=cc), "noreply@example.org"), key).content
    assert dkimpy.verify(signed, dnsfunc=dns) is True
    assert old in signed
    assert dkimpy.verify(signed.replace(old, new, 1), dnsfunc=dns) is False


# -- delivery ------------------------------------------------------------------------------------------


async def test_every_recipient_gets_its_own_copy_with_bcc_in_the_envelope_only(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_to(db_url, A, name="Ann", to_extra=[B], cc=[C], bcc=["secret@example.net"],
               reply_to=["desk@example.org"])  # fmt: skip
    assert await run_until_drained(db_url, fast) == 1
    assert [m.rcpt_tos for m in smtp_sink.messages] == [(A,), (B,), (C,), ("secret@example.net",)]
    for message in smtp_sink.messages:
        assert b"secret" not in message.content and b"Bcc" not in message.content
        assert message.message["To"] == f"Ann <{A}>, {B}"
        assert message.message["Cc"] == C
        assert message.message["Reply-To"] == "desk@example.org"
    # Each copy names its own recipient: what comes back from one acts for that one alone.
    assert len({m.message["Message-ID"] for m in smtp_sink.messages}) == 4
    assert statuses(db_url) == {"sent": 1}
    assert outcomes(db_url) == []


async def test_a_suppressed_recipient_is_dropped_and_recorded_while_the_others_get_the_message(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO mailroom.bounce_list (email, bounce_type) VALUES (%s, 'hard')", (A,))
        conn.execute("INSERT INTO mailroom.unsubscribe_list (email, source) VALUES (%s, 'one_click')", (C,))
    enqueue_to(db_url, A, campaign_id="news", cc=[B], bcc=[C.upper()])
    await run_until_drained(db_url, fast)
    assert [m.rcpt_tos for m in smtp_sink.messages] == [(B,)]
    assert one_row(db_url, "SELECT status, suppression_reason FROM mailroom.email_queue") == ("sent", None)
    assert outcomes(db_url) == [
        (A, "to", "suppressed", None, None, "on the bounce list (hard)"),
        (C.upper(), "bcc", "suppressed", None, None, "unsubscribed"),
    ]


async def test_an_email_is_suppressed_only_when_every_recipient_is(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        for address in (A, B):
            conn.execute(
                "INSERT INTO mailroom.unsubscribe_list (email, source) VALUES (%s, 'one_click')", (address,)
            )
        conn.execute("INSERT INTO mailroom.bounce_list (email, bounce_type) VALUES (%s, 'complaint')", (C,))
    enqueue_to(db_url, A, campaign_id="news", to_extra=[B], bcc=[C])
    await run_until_drained(db_url, fast)
    assert smtp_sink.messages == []
    status, reason = one_row(db_url, "SELECT status, suppression_reason FROM mailroom.email_queue")
    assert (status, reason) == ("suppressed", "every recipient suppressed; the first: unsubscribed")
    assert [(r[0], r[2], r[5]) for r in outcomes(db_url)] == [
        (A, "suppressed", "unsubscribed"),
        (B, "suppressed", "unsubscribed"),
        (C, "suppressed", "on the bounce list (complaint)"),
    ]
    assert one_row(db_url, "SELECT outcome FROM mailroom.send_logs") == ("suppressed",)


async def test_transactional_email_ignores_unsubscribes_but_not_bounces_per_recipient(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO mailroom.unsubscribe_list (email, source) VALUES (%s, 'one_click')", (B,))
        conn.execute("INSERT INTO mailroom.bounce_list (email, bounce_type) VALUES (%s, 'complaint')", (C,))
    enqueue_to(db_url, A, cc=[B], bcc=[C])  # no campaign: transactional
    await run_until_drained(db_url, fast)
    assert [m.rcpt_tos for m in smtp_sink.messages] == [(A,), (B,)]
    assert outcomes(db_url) == [(C, "bcc", "suppressed", None, None, "on the bounce list (complaint)")]


async def test_one_bad_mailbox_of_three_is_recorded_and_bounced_and_the_others_get_the_message(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_rcpt(B, "550 5.1.1 User unknown")
    enqueue_to(db_url, A, cc=[B], bcc=[C])
    assert await run_until_drained(db_url, fast) == 1
    assert [m.rcpt_tos for m in smtp_sink.messages] == [(A,), (C,)]
    assert one_row(db_url, "SELECT status, last_error FROM mailroom.email_queue") == ("sent", None)
    assert outcomes(db_url) == [(B, "cc", "refused", 550, "5.1.1", "5.1.1 User unknown")]
    assert one_row(db_url, "SELECT email, bounce_type, enhanced_code FROM mailroom.bounce_list") == (
        B,
        "hard",
        "5.1.1",
    )
    assert one_row(db_url, "SELECT bounces FROM mailroom.sender_usage") == (1,)


async def test_a_temporary_refusal_of_one_recipient_is_recorded_without_bouncing_it(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_rcpt(A, "450 4.2.0 Mailbox busy")
    enqueue_to(db_url, A, to_extra=[B])
    await run_until_drained(db_url, fast)
    assert [m.rcpt_tos for m in smtp_sink.messages] == [(B,)]
    assert statuses(db_url) == {"sent": 1}
    assert outcomes(db_url) == [(A, "to", "refused", 450, "4.2.0", "4.2.0 Mailbox busy")]
    assert one_row(db_url, "SELECT count(*) FROM mailroom.bounce_list") == (0,)


async def test_a_session_cut_after_one_copy_retries_the_others_and_never_resends_the_first(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_rcpt(B, Drop(), Accept())  # the relay drops the connection at B's RCPT, once
    enqueue_to(db_url, A, cc=[B], bcc=[C], max_retries=3)
    await run_until_drained(db_url, fast, rounds=2)
    # A got its copy in the first attempt; the retry sent B and C theirs, and A nothing again.
    assert [m.rcpt_tos for m in smtp_sink.messages] == [(A,), (B,), (C,)]
    assert one_row(db_url, "SELECT status, retry_count FROM mailroom.email_queue") == ("sent", 1)
    assert [(r[0], r[1], r[2]) for r in outcomes(db_url)] == [(A, "to", "accepted")]


async def test_a_refusal_of_mail_from_after_one_copy_releases_the_email_for_the_others_only(
    db_url: str, fast: Settings, scripted: Callable[[dict[str, str]], ScriptedServer]
) -> None:
    # The first MAIL is answered 250, every later one 451: the sender's trouble, not B's.
    server = scripted({"mail": "451 4.3.0 Try again later"})
    server.first["mail"] = ["250 2.1.0 Ok"]
    await server.start()
    add_sender(db_url, server.port)
    enqueue_to(db_url, A, cc=[B])
    await run_until_drained(db_url, fast)
    with psycopg.connect(db_url) as conn:
        status = conn.execute("SELECT status, retry_count FROM mailroom.email_queue").fetchone()
    assert status is not None and status[0] == "pending"
    assert [(r[0], r[2]) for r in outcomes(db_url)] == [(A, "accepted")]


async def test_every_recipient_refused_permanently_fails_the_email_and_bounces_each_mailbox(
    db_url: str, fast: Settings, scripted: Callable[[dict[str, str]], ScriptedServer]
) -> None:
    server = await scripted({"rcpt": "550 5.1.1 No such user"}).start()
    add_sender(db_url, server.port)
    enqueue_to(db_url, A, cc=[B], bcc=[C])
    await run_until_drained(db_url, fast)
    assert server.bodies == 0
    assert [c for c in server.received if c.startswith("RCPT")] == [f"RCPT TO:<{x}>" for x in (A, B, C)]
    assert "DATA" not in server.received
    assert one_row(db_url, "SELECT status, last_error FROM mailroom.email_queue") == (
        "failed",
        "550 5.1.1 No such user",
    )
    assert [(r[0], r[2], r[3]) for r in outcomes(db_url)] == [(x, "refused", 550) for x in (A, B, C)]
    with psycopg.connect(db_url) as conn:
        bounced = conn.execute("SELECT email FROM mailroom.bounce_list ORDER BY email").fetchall()
    assert bounced == [(A,), (B,), (C,)]


async def test_every_recipient_refused_temporarily_retries_the_email(
    db_url: str, fast: Settings, scripted: Callable[[dict[str, str]], ScriptedServer]
) -> None:
    server = await scripted({"rcpt": "451 4.3.0 Try again later"}).start()
    add_sender(db_url, server.port)
    enqueue_to(db_url, A, cc=[B], max_retries=1)
    await run_until_drained(db_url, fast, rounds=3)
    assert server.bodies == 0
    with psycopg.connect(db_url) as conn:
        logs = conn.execute(
            "SELECT attempt, outcome, smtp_code FROM mailroom.send_logs ORDER BY attempt"
        ).fetchall()
    # Retried (not failed at once), then failed when its retries ran out; nobody bounced.
    assert logs == [(1, "transient", 451), (2, "transient", 451)]
    assert one_row(db_url, "SELECT status, retry_count FROM mailroom.email_queue") == ("failed", 1)
    assert [(r[0], r[2], r[3]) for r in outcomes(db_url)] == [(A, "refused", 451), (B, "refused", 451)] * 2
    assert one_row(db_url, "SELECT count(*) FROM mailroom.bounce_list") == (0,)


async def test_a_bad_cc_address_written_around_the_api_fails_the_email_with_the_reason(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    email_id = enqueue_to(db_url, A)
    with psycopg.connect(db_url) as conn:
        # As a row from before the database checked these lists would be (its triggers off for this write).
        conn.execute("ALTER TABLE mailroom.email_queue DISABLE TRIGGER USER")
        conn.execute(
            "UPDATE mailroom.email_queue SET cc = ARRAY['not an address'] WHERE id = %s", (email_id,)
        )
        conn.execute("ALTER TABLE mailroom.email_queue ENABLE TRIGGER USER")
    await run_until_drained(db_url, fast)
    assert smtp_sink.messages == []
    status, error = one_row(db_url, "SELECT status, last_error FROM mailroom.email_queue")
    assert status == "failed"
    assert error.startswith("cannot build the message: cc[1]: invalid email address")


# -- the SMTP session ----------------------------------------------------------------------------------


async def test_a_many_recipient_message_is_never_pipelined_nor_announced_and_single_ones_still_are(
    smtp_sink: RunningSink,
) -> None:
    def single(to: str) -> Envelope:
        return Envelope("noreply@example.org", to, f"<{to}>", b"Subject: x\r\n\r\nbody\r\n")

    many = Envelope("noreply@example.org", A, "<many>", b"Subject: x\r\n\r\nbody\r\n", (A, B, C))
    connection = SmtpConnection(SmtpAccount(1, "127.0.0.1", smtp_sink.port, "none", None, None, 5.0))
    try:
        first = await connection.send(single("one@example.com"), many)
        middle = await connection.send(many, single("two@example.com"))
        last = await connection.send(single("two@example.com"), single("three@example.com"))
        after = await connection.send(single("three@example.com"))
    finally:
        await connection.close()
    assert [a.reply.code for a in (first, middle, last, after)] == [250] * 4
    assert middle.many and not first.many
    assert [m.rcpt_tos for m in smtp_sink.messages] == [
        ("one@example.com",), (A,), (B,), (C,), ("two@example.com",), ("three@example.com",)
    ]  # fmt: skip
    assert len({m.peer for m in smtp_sink.messages}) == 1
    # "one" and "two" each pipelined their own MAIL, RCPT and DATA (nothing rode behind a body before
    # or after the many-recipient message); "three" rode behind "two"'s body as before.
    assert smtp_sink.handler.pipelined_reads == 2
    assert smtp_sink.handler.announced_reads == 1
