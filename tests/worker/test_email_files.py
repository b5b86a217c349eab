"""Attachments and inline images through every door (Python API and SQL as an application role, JSON
lines), sent by a real worker to a real SMTP server, DKIM-signed; each content stored once and gone with
the last email that carries it; hostile filenames and writers refused."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from email.policy import default as default_policy

import dkim as dkimpy
import psycopg
import pytest
from psycopg import errors

from mailroom import Attachment, EmailRequest, ValidationError, enqueue, enqueue_many
from tests.cli import run
from tests.fixtures_db import drop_roles, role_url
from tests.worker.helpers import run_until_drained
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.dkim import dns_record, normalise_private_key
from worker.devtools.sink import RunningSink
from worker.ops import roles
from worker.ops.senders import SenderSpec, add_sender

pytestmark = pytest.mark.usefixtures("role_lock")

SHOP, READER = "mr_files_shop", "mr_files_reader"
PDF = b"%PDF-1.7\n" + bytes(range(256)) * 800 + b"\n%%EOF\n"  # ~200 KB, every byte value
TICKET = {"filename": "ticket.ics", "content": "QkVHSU46VkNBTEVOREFS", "content_type": "text/calendar"}
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\xff" * 300


@pytest.fixture
def shop(db_url: str) -> Iterator[str]:
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "app", SHOP, create=True, actor="tester")
        roles.grant(conn, "read-only", READER, create=True, actor="tester")
    try:
        yield role_url(db_url, SHOP)
    finally:
        drop_roles(db_url, SHOP, READER)


def _receipt(to: str, **more: object) -> EmailRequest:
    return EmailRequest(
        to=to,
        subject="Your receipt",
        text="Thank you. Your invoice is attached.",
        html='<p><img src="cid:logo"> Thank you. Your invoice is attached.</p>',
        attachments=[
            Attachment("invoice 42.pdf", PDF),
            Attachment("logo.png", PNG, content_id="logo"),
        ],
        **more,  # type: ignore[arg-type]
    )


def _parts(message: Message) -> dict[str, tuple[str, bytes, str | None, str | None]]:
    """Every part with a filename: filename -> (content type, bytes, disposition, Content-ID)."""
    found = {}
    for part in message.walk():
        name = part.get_filename()
        if name:
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            found[name] = (
                part.get_content_type(),
                payload,
                part.get_content_disposition(),
                part["Content-ID"],
            )
    return found


def _dkim_sender(db_url: str, settings: Settings, port: int, pem: bytes) -> None:
    with psycopg.connect(db_url) as conn:
        spec = SenderSpec(
            "signed", "shop@example.org", "127.0.0.1", port, smtp_security="none",
            dkim_domain="example.org", dkim_selector="mail2026",
        )  # fmt: skip
        add_sender(conn, spec, None, SecretBox(settings.secret_key or ""), pem)


def _verifies(message: bytes, pem: bytes) -> bool:
    record = dns_record(normalise_private_key(pem)).encode("ascii")

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name == b"mail2026._domainkey.example.org." else None

    return bool(dkimpy.verify(message, dnsfunc=lookup))


async def test_a_receipt_leaves_with_its_pdf_and_inline_logo_signed_and_each_content_is_stored_once(
    db_url: str, shop: str, settings: Settings, smtp_sink: RunningSink, pem: bytes
) -> None:
    _dkim_sender(db_url, settings, smtp_sink.port, pem)
    with psycopg.connect(shop) as conn:
        ids = enqueue_many(conn, [_receipt("ada@example.com"), _receipt("bob@example.com")])
        (from_sql,) = conn.execute(
            "SELECT mailroom.enqueue(ARRAY['cy@example.com'], 'Your ticket', 'See the calendar file.',"
            " attachments => %s::jsonb)",
            (json.dumps([TICKET]),),
        ).fetchone()  # type: ignore[misc]
    with psycopg.connect(db_url) as conn:
        stored = conn.execute(
            "SELECT sha256, size FROM mailroom.attachment_contents ORDER BY size"
        ).fetchall()
        counts = conn.execute("SELECT id, attachments FROM mailroom.email_queue ORDER BY id").fetchall()
    # the PDF and the logo of two receipts, and the calendar file: three contents
    assert sorted(bytes(h) for h, _ in stored) == sorted(
        hashlib.sha256(c).digest() for c in (PDF, PNG, b"BEGIN:VCALENDAR")
    )
    assert counts == [(ids[0], 2), (ids[1], 2), (from_sql, 1)]
    assert await run_until_drained(db_url, settings) == 3
    by_recipient = {m.rcpt_tos[0]: m for m in smtp_sink.messages}
    for who in ("ada@example.com", "bob@example.com"):
        received = by_recipient[who]
        message = message_from_bytes(received.content, policy=default_policy)
        assert message.get_content_type() == "multipart/mixed"
        parts = _parts(message)
        assert parts["invoice 42.pdf"] == ("application/pdf", PDF, "attachment", None)
        assert parts["logo.png"] == ("image/png", PNG, "inline", "<logo>")
        related = message.get_payload()[0]  # type: ignore[index]
        assert related.get_content_type() == "multipart/related"
        body = message.get_body(("html",))
        assert body is not None and "cid:logo" in body.get_content()
        assert _verifies(received.content, pem)
    ticket = message_from_bytes(by_recipient["cy@example.com"].content, policy=default_policy)
    assert _parts(ticket) == {"ticket.ics": ("text/calendar", b"BEGIN:VCALENDAR", "attachment", None)}
    # Gone with the last email that carries it: deleting one receipt keeps the shared contents.
    with psycopg.connect(db_url) as conn:
        conn.execute("DELETE FROM mailroom.email_queue WHERE id = %s", (ids[0],))
        assert conn.execute("SELECT count(*) FROM mailroom.attachment_contents").fetchone() == (3,)
        conn.execute("DELETE FROM mailroom.email_queue WHERE id = ANY(%s)", ([int(ids[1]), from_sql],))
        assert conn.execute("SELECT count(*) FROM mailroom.attachment_contents").fetchone() == (0,)


@pytest.mark.parametrize(
    ("attachment", "html", "field", "message"),
    [
        (Attachment("../../etc/passwd", b"x"), None, "attachments[1].filename", "never a path"),
        (Attachment("a\r\nBcc: victim@example.com", b"x"), None, "attachments[1].filename", "not allowed"),
        (Attachment("ok.pdf", b""), None, "attachments[1].content", "empty"),
        (Attachment("ok.pdf", "text"), None, "attachments[1].content", "must be bytes"),  # type: ignore[arg-type]
        (Attachment("ok.pdf", b"x", content_type="text/html\r\nX: y"), None, "attachments[1].content_type", "type/subtype"),
        (Attachment("ok.pdf", b"x" * 2001), None, "attachments[1].content", "2000-byte limit"),
        (Attachment("logo.png", PNG, content_id="logo"), "<p>no image</p>", "attachments[1].content_id", "never shows it"),
        (Attachment("logo.png", PNG, content_id="<logo>"), "<p>cid:<logo></p>", "attachments[1].content_id", "letters"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_naming_it_and_nothing_is_written(
    db_url: str,
    shop: str,
    monkeypatch: pytest.MonkeyPatch,
    attachment: Attachment,
    html: str | None,
    field: str,
    message: str,
) -> None:
    monkeypatch.setenv("MAILROOM_MAX_ATTACHMENT_BYTES", "2000")
    monkeypatch.setenv("MAILROOM_MAX_ATTACHMENTS_BYTES", "3000")
    files = [Attachment(f"{i}.bin", b"x" * 1500) for i in range(3)]
    with psycopg.connect(shop) as conn:
        with pytest.raises(ValidationError, match=message) as refused:
            enqueue(
                conn,
                EmailRequest(to="a@example.com", subject="s", text="t", html=html, attachments=[attachment]),
            )
        assert refused.value.field == field
        with pytest.raises(ValidationError, match="3000-byte limit"):
            enqueue(conn, EmailRequest(to="a@example.com", subject="s", text="t", attachments=files))
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM mailroom.email_queue").fetchone() == (0,)


def test_hostile_writers_meet_the_databases_own_checks_and_readers_see_no_content(
    db_url: str, shop: str
) -> None:
    bad = [
        ({"filename": "../x", "content": "eA=="}, errors.CheckViolation),
        ({"filename": "x\r\nBcc: a@b.c", "content": "eA=="}, errors.CheckViolation),
        ({"filename": "x", "content": "eA==", "content_type": "text/html; charset=x"}, errors.CheckViolation),
        ({"filename": "x", "content": "not base64!"}, errors.InvalidParameterValue),
        ({"filename": "x", "content": "eA==", "path": "/etc/passwd"}, errors.InvalidParameterValue),
    ]
    with psycopg.connect(shop, autocommit=True) as conn:
        for file, error in bad:
            with pytest.raises(error):
                conn.execute(
                    "SELECT mailroom.enqueue(ARRAY['a@example.com'], 's', 't', attachments => %s::jsonb)",
                    (json.dumps([file]),),
                )
        enqueue(conn, _receipt("ada@example.com"))
        # an application may not reach the tables, nor the function that stores files unchecked
        for statement in (
            "SELECT * FROM mailroom.attachment_contents",
            "SELECT * FROM mailroom.email_attachments",
            "SELECT mailroom.store_attachments('{1}', '{1}', '{x}', '{text/plain}', '{NULL}', '{1}', '{x}')",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(role_url(db_url, READER), autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM mailroom.email_attachments").fetchone() == (2,)
        for statement in (
            "SELECT content FROM mailroom.attachment_contents",
            "SELECT filename FROM mailroom.email_attachments",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)


def test_json_lines_carry_files_as_an_application_role_and_beside_the_operators_copy_load(
    db_url: str, shop: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def line(to: str, **more: object) -> str:
        files = [{"filename": "invoice.pdf", "content": base64.b64encode(PDF).decode()}]
        return json.dumps({"to": to, "subject": "Invoice", "text": "Attached.", "attachments": files, **more})

    plain = json.dumps({"to": "plain@example.com", "subject": "s", "text": "t"})
    broken = json.dumps(
        {"to": "bob@example.com", "subject": "s", "text": "t", "attachments": [{"filename": "x"}]}
    )
    monkeypatch.setenv("MAILROOM_DATABASE_URL", shop)
    code, out, err = run(
        capsys, "enqueue", stdin="\n".join([line("ada@example.com"), broken]), monkeypatch=monkeypatch
    )
    answers = [json.loads(a) for a in out.splitlines()]
    assert code == 1 and "1 accepted, 1 rejected" in err, err
    assert answers[0]["line"] == 1 and "id" in answers[0]
    assert answers[1]["line"] == 2 and answers[1]["field"] == "attachments[1].content"
    # The operator's load copies plain lines and writes those with files (or a From) through the door.
    monkeypatch.setenv("MAILROOM_DATABASE_URL", db_url)
    owner = [plain, line("cy@example.com"), line("dan@example.com", from_email="x@nowhere.example"), broken]
    code, out, err = run(capsys, "enqueue", stdin="\n".join(owner), monkeypatch=monkeypatch)
    results = [json.loads(a) for a in out.splitlines()]
    assert code == 1 and "2 accepted, 2 rejected" in err, err
    assert [r["line"] for r in results] == [1, 2, 3, 4]
    assert "id" in results[0] and "id" in results[1]
    assert results[2]["field"] == "from_email" and results[3]["field"] == "attachments[1].content"
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT q.recipient_email, a.filename, c.content FROM mailroom.email_queue q"
            " JOIN mailroom.email_attachments a ON a.email_id = q.id"
            " JOIN mailroom.attachment_contents c ON c.sha256 = a.sha256 ORDER BY q.id"
        ).fetchall()
        counted = conn.execute(
            "SELECT recipient_email, attachments FROM mailroom.email_queue ORDER BY id"
        ).fetchall()
    assert rows == [("ada@example.com", "invoice.pdf", PDF), ("cy@example.com", "invoice.pdf", PDF)]
    assert counted == [("ada@example.com", 1), ("plain@example.com", 0), ("cy@example.com", 1)]


def test_privacy_export_hands_over_the_files_and_erasure_removes_them_keeping_what_others_carry(
    db_url: str, shop: str
) -> None:
    from worker.ops.privacy import erase_address, export_address

    with psycopg.connect(shop) as conn:
        ada, bob = enqueue_many(conn, [_receipt("ada@example.com"), _receipt("bob@example.com")])
        own = enqueue(
            conn,
            EmailRequest(
                to="ada@example.com", subject="s", text="t", attachments=[Attachment("ada.txt", b"Ada's own")]
            ),
        )
    with psycopg.connect(db_url) as conn:
        exported = export_address(conn, "ada@example.com")["attachments"]
        assert [(f["email_id"], f["filename"]) for f in exported] == [
            (ada, "invoice 42.pdf"), (ada, "logo.png"), (own, "ada.txt")
        ]  # fmt: skip
        assert base64.b64decode(exported[2]["content"]) == b"Ada's own"
        erase_address(conn, "ada@example.com")
        conn.commit()
        left = conn.execute(
            "SELECT a.email_id, c.content FROM mailroom.email_attachments a"
            " JOIN mailroom.attachment_contents c ON c.sha256 = a.sha256 ORDER BY a.position"
        ).fetchall()
        # Bob's receipt keeps the shared PDF and logo; Ada's own file is gone from the database.
        assert [(e, bytes(c)) for e, c in left] == [(bob, PDF), (bob, PNG)]
        assert conn.execute("SELECT count(*) FROM mailroom.attachment_contents").fetchone() == (2,)
        assert conn.execute(
            "SELECT attachments FROM mailroom.email_queue WHERE id = %s", (own,)
        ).fetchone() == (0,)


def test_retention_archives_the_email_and_removes_its_files_with_the_last_email_carrying_them(
    db_url: str, shop: str, settings: Settings
) -> None:
    from dataclasses import replace
    from datetime import timedelta

    from worker.ops.retention import run_maintenance

    with psycopg.connect(shop) as conn:
        old, kept = enqueue_many(conn, [_receipt("ada@example.com"), _receipt("bob@example.com")])
    with psycopg.connect(db_url) as conn:
        for email_id in (old, kept):
            conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = %s", (email_id,))
        conn.execute(
            "UPDATE mailroom.email_queue SET finished_at = now() - interval '30 days' WHERE id = %s", (old,)
        )
        now = conn.execute("SELECT now()").fetchone()
    assert now is not None
    aged = replace(settings, archive_cancelled_after_days=7)
    with psycopg.connect(db_url, autocommit=True) as conn:
        report = run_maintenance(conn, aged, now=now[0] + timedelta(seconds=1))
        assert not report.errors and report.retention["cancelled"].deleted == 1
        # the receipt still queued carries the same PDF and logo: they stay, its files with them
        assert conn.execute("SELECT count(*) FROM mailroom.attachment_contents").fetchone() == (2,)
        assert conn.execute("SELECT DISTINCT email_id FROM mailroom.email_attachments").fetchall() == [
            (kept,)
        ]
        conn.execute(
            "UPDATE mailroom.email_queue SET finished_at = now() - interval '30 days' WHERE id = %s", (kept,)
        )
        report = run_maintenance(conn, aged, now=now[0] + timedelta(seconds=2))
        assert not report.errors and report.retention["cancelled"].deleted == 1
        assert conn.execute("SELECT count(*) FROM mailroom.attachment_contents").fetchone() == (0,)


def test_json_lines_and_sql_take_a_lifetime_and_a_stream(
    db_url: str, shop: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAILROOM_DATABASE_URL", shop)
    lines = [
        {"to": "a@example.com", "subject": "Code", "text": "123", "expires_at": "2099-01-01T00:00:00+00:00",
         "stream": "codes"},
        {"to": "b@example.com", "subject": "Code", "text": "123", "expires_at": "2099-01-01"},
    ]  # fmt: skip
    code, out, _ = run(
        capsys, "enqueue", stdin="\n".join(json.dumps(line) for line in lines), monkeypatch=monkeypatch
    )
    first, second = (json.loads(line) for line in out.splitlines())
    assert code == 1 and "id" in first and second["field"] == "expires_at" and "UTC offset" in second["error"]
    with psycopg.connect(shop) as conn:
        (from_sql,) = conn.execute(
            "SELECT mailroom.enqueue(ARRAY['c@example.com'], 's', 't', stream => 'codes',"
            " expires_at => now() + interval '10 minutes')"
        ).fetchone()  # type: ignore[misc]
        conn.commit()
        with pytest.raises(errors.InvalidParameterValue, match="stream: a name"):
            conn.execute("SELECT mailroom.enqueue(ARRAY['d@example.com'], 's', 't', stream => 'Bulk Mail')")
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT id, stream, expires_at IS NOT NULL FROM mailroom.email_queue ORDER BY id"
        ).fetchall()
    assert rows == [(first["id"], "codes", True), (from_sql, "codes", True)]
