"""`mailroom.contrib.django.EmailBackend`: Django's send_mail and EmailMessage enqueue in Django's own
transaction, on the connection of its database alias, as the owner and as an application role."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from email.mime.image import MIMEImage
from typing import Any

import django
import psycopg
import pytest
from django.conf import settings
from django.core import mail
from django.core.mail import (
    EmailMessage,
    EmailMultiAlternatives,
    mail_admins,
    mail_managers,
    send_mail,
    send_mass_mail,
)
from django.db import connections, transaction
from django.db.utils import DatabaseError, ProgrammingError
from django.test import override_settings
from django.utils.connection import ConnectionDoesNotExist
from django.utils.log import AdminEmailHandler
from psycopg.conninfo import conninfo_to_dict

import mailroom
from mailroom.contrib.django import EmailBackend
from tests.fixtures_db import drop_roles, role_url
from tests.worker.helpers import add_sender, run_until_drained
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.ops import roles

FROM = "noreply@example.org"  # the From of the tests' sender account (tests.worker.helpers.add_sender)

if not settings.configured:
    settings.configure(
        DATABASES={
            "default": {"ENGINE": "django.db.backends.postgresql", "NAME": "unset"},
            "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
        },
        INSTALLED_APPS=[],
        EMAIL_BACKEND="mailroom.contrib.django.EmailBackend",
        DEFAULT_FROM_EMAIL=FROM,
        USE_TZ=True,
        SECRET_KEY="tests",  # Django's error report (AdminEmailHandler) reads it, hidden
    )
    django.setup()


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public API reads `MAILROOM_*` itself: each test starts from the defaults."""
    for name in [n for n in os.environ if n.startswith("MAILROOM_")]:
        monkeypatch.delenv(name)


@contextmanager
def _point_django_at(conninfo: str) -> Iterator[None]:
    """Django's default connection on `conninfo` (this test's database) for the test, closed after."""
    params: dict[str, Any] = {key: str(value) for key, value in conninfo_to_dict(conninfo).items()}
    connection = connections["default"]
    connection.close()
    saved = dict(connection.settings_dict)
    connection.settings_dict.update(
        NAME=params.pop("dbname", ""),
        USER=params.pop("user", ""),
        PASSWORD=params.pop("password", ""),
        HOST=params.pop("host", ""),
        PORT=params.pop("port", ""),
        OPTIONS=params,  # any other libpq parameter, as Django passes OPTIONS to psycopg
    )
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@pytest.fixture(params=["owner", "app role"])
def django_db(request: pytest.FixtureRequest, db_url: str) -> Iterator[str]:
    """Django connected as the test database's owner, and as a role made by `mailroom db grant app`
    (no privilege on any table); every case reads what was stored as the owner (`db_url`)."""
    if request.param == "owner":
        with _point_django_at(db_url):
            yield db_url
        return
    request.getfixturevalue("role_lock")
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "app", "mr_django_app", create=True, actor="tester")
    try:
        with _point_django_at(role_url(db_url, "mr_django_app")):
            yield db_url
    finally:
        drop_roles(db_url, "mr_django_app")


def _stored(db_url: str) -> list[str]:
    """The recipients of the committed queue rows, seen from another connection."""
    with psycopg.connect(db_url) as other:
        rows = other.execute("SELECT recipient_email FROM mailroom.email_queue ORDER BY id").fetchall()
    return [row[0] for row in rows]


class Boom(Exception):
    pass


def _send_then_fail(to: str) -> None:
    """Send in an atomic block that then raises: the block rolls back (a savepoint, when nested)."""
    with transaction.atomic():
        send_mail("Hi", "Text.", None, [to])
        raise Boom


def test_send_mail_inside_atomic_commits_with_the_transaction(django_db: str, db_url: str) -> None:
    with transaction.atomic():
        sent = send_mail("Order 42 received", "Thank you.", None, ["ada@example.com"])
        assert sent == 1
        assert _stored(db_url) == []  # nobody else sees it before the commit
    assert _stored(db_url) == ["ada@example.com"]


def test_send_mail_outside_a_transaction_is_its_own(django_db: str, db_url: str) -> None:
    assert send_mail("Hi", "Text.", FROM, ["ada@example.com", "bob@example.com"]) == 1
    assert connections["default"].get_autocommit()
    assert _stored(db_url) == ["ada@example.com"]


def test_an_exception_inside_atomic_leaves_no_email(django_db: str, db_url: str) -> None:
    with pytest.raises(Boom):
        _send_then_fail("ada@example.com")
    assert _stored(db_url) == []


def test_a_rolled_back_inner_atomic_takes_only_its_own_email(django_db: str, db_url: str) -> None:
    with transaction.atomic():
        send_mail("Outer", "Text.", None, ["outer@example.com"])
        with pytest.raises(Boom):
            _send_then_fail("inner@example.com")
    assert _stored(db_url) == ["outer@example.com"]


def test_every_field_of_a_multi_alternatives_message_is_stored(django_db: str, db_url: str) -> None:
    message = EmailMultiAlternatives(
        subject="Your invoice",
        body="Plain text.",
        from_email=FROM,
        to=["Ada Lovelace <ada@example.com>", "second@example.com"],
        cc=["cc@example.com"],
        bcc=["bcc@example.com"],
        reply_to=["support@example.org"],
        headers={"X-Order": "42", "X-Mailroom-Idempotency-Key": "invoice-42"},
    )
    message.attach_alternative("<p>HTML</p>", "text/html")
    assert message.send() == 1
    assert message.send() == 1  # the same idempotency key: the first email, nothing new
    with psycopg.connect(db_url) as owner:
        row = owner.execute(
            "SELECT recipient_email, recipient_name, to_extra, subject, text_body, html_body, cc, bcc,"
            " reply_to, headers, idempotency_key FROM mailroom.email_queue"
        ).fetchall()
    assert row == [
        (
            "ada@example.com",
            "Ada Lovelace",
            ["second@example.com"],
            "Your invoice",
            "Plain text.",
            "<p>HTML</p>",
            ["cc@example.com"],
            ["bcc@example.com"],
            ["support@example.org"],
            {"X-Order": "42"},
            "invoice-42",
        )
    ]


def test_an_html_body_and_a_reply_to_header_go_to_their_fields(django_db: str, db_url: str) -> None:
    message = EmailMessage(
        "Hi", "<b>Hi</b>", None, ["ada@example.com"], headers={"Reply-To": "h@example.org"}
    )
    message.content_subtype = "html"
    assert message.send() == 1
    with psycopg.connect(db_url) as owner:
        row = owner.execute(
            "SELECT text_body, html_body, reply_to, headers FROM mailroom.email_queue"
        ).fetchone()
    assert row is not None
    assert row[:3] == (None, "<b>Hi</b>", ["h@example.org"])
    assert not row[3]


def test_a_refused_message_raises_and_its_batch_writes_nothing(django_db: str, db_url: str) -> None:
    good = EmailMessage("Hi", "Text.", None, ["ada@example.com"])
    bad = EmailMessage("Hi", "Text.", None, ["not an address"])
    with pytest.raises(mailroom.ValidationError) as refused:
        EmailBackend().send_messages([good, bad])
    assert isinstance(refused.value, mailroom.BatchValidationError)
    assert refused.value.index == 1
    with pytest.raises(mailroom.ValidationError):
        send_mass_mail(
            [("Hi", "Text.", None, ["bob@example.com"]), ("Hi", "Text.", None, ["not an address"])]
        )
    assert send_mail("Hi", "Text.", None, ["not an address"], fail_silently=True) == 0
    assert _stored(db_url) == []


def test_fail_silently_skips_only_the_refused_messages(django_db: str, db_url: str) -> None:
    """As Django's SMTP backend, which sends each message on its own and counts those sent."""
    attached = EmailMessage("Hi", "Text.", None, ["attached@example.com"])
    attached.attach("../invoice.txt", "42", "text/plain")  # a path, not a name: Mailroom's ValidationError
    messages = [
        EmailMessage("Hi", "Text.", None, ["ada@example.com"]),
        EmailMessage("Hi", "Text.", None, ["not an address"]),  # Mailroom's ValidationError
        EmailMessage("Hi", "Text.", "someone@else.example", ["foreign@example.com"]),  # a foreign From
        attached,
        EmailMessage("Hi", "Text.", None, ["Two <two@example.com>, three@example.com"]),
        EmailMessage("Hi", "Text.", None, ["bob@example.com"]),
    ]
    assert EmailBackend(fail_silently=True).send_messages(messages) == 2
    assert _stored(db_url) == ["ada@example.com", "bob@example.com"]
    datatuple = [
        ("Hi", "Text.", None, ["carol@example.com"]),
        ("Hi", "Text.", None, ["not an address"]),
        ("Hi", "Text.", None, ["dave@example.com"]),
    ]
    with transaction.atomic():  # in the caller's transaction: the refused one takes only its savepoint
        assert send_mass_mail(datatuple, fail_silently=True) == 2
        assert send_mail("Hi", "Text.", None, ["erin@example.com"]) == 1
    assert _stored(db_url)[2:] == ["carol@example.com", "dave@example.com", "erin@example.com"]


def test_a_swallowed_failure_leaves_the_callers_transaction_usable(django_db: str, db_url: str) -> None:
    with transaction.atomic():
        assert send_mail("Hi", "Text.", None, ["not an address"], fail_silently=True) == 0
        assert send_mail("Hi", "Text.", None, ["ada@example.com"]) == 1
    assert _stored(db_url) == ["ada@example.com"]


@pytest.mark.parametrize("header", ["Message-ID", "Date"])
def test_a_header_mailroom_sets_itself_is_refused(django_db: str, db_url: str, header: str) -> None:
    message = EmailMessage("Hi", "Text.", None, ["ada@example.com"], headers={header: "x"})
    with pytest.raises(mailroom.ValidationError):
        message.send()
    assert _stored(db_url) == []


def test_a_from_no_sender_account_may_send_is_refused_or_skipped_silently(
    django_db: str, db_url: str
) -> None:
    with pytest.raises(mailroom.ValidationError, match="from_email: no sender account"):
        send_mail("Hi", "Text.", "someone@else.example", ["ada@example.com"])
    with pytest.raises(mailroom.ValidationError, match="from_email"):
        EmailMessage("Hi", "Text.", None, ["ada@example.com"], headers={"From": "x@else.example"}).send()
    with pytest.raises(ValueError, match="differs from from_email"):
        EmailMessage(
            "Hi", "Text.", "a@example.org", ["ada@example.com"], headers={"From": "b@example.org"}
        ).send()
    assert send_mail("Hi", "Text.", "someone@else.example", ["ada@example.com"], fail_silently=True) == 0
    assert _stored(db_url) == []


def test_a_from_of_a_domain_an_account_sends_for_is_the_emails_own(django_db: str, db_url: str) -> None:
    add_sender(db_url, 2525)  # noreply@example.org: it may send a From in example.org
    assert (
        send_mail("Invoice", "Attached.", "Example Billing <invoices@example.org>", ["ada@example.com"]) == 1
    )
    assert send_mail("Hi", "Text.", None, ["bob@example.com"]) == 1  # DEFAULT_FROM_EMAIL: the account's own
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT recipient_email, from_email, from_name FROM mailroom.email_queue ORDER BY id"
        ).fetchall()
    assert rows == [
        ("ada@example.com", "invoices@example.org", "Example Billing"),
        ("bob@example.com", None, None),
    ]


ADMINS = [("Ops", "ops@example.com")]


@override_settings(ADMINS=ADMINS, MANAGERS=[("Boss", "boss@example.com")])
def test_mail_admins_and_managers_send_from_server_email(django_db: str, db_url: str) -> None:
    """They send from SERVER_EMAIL, "root@localhost" unless set: Mailroom takes it as the sender's From."""
    assert settings.SERVER_EMAIL == "root@localhost"
    mail_admins("Disk full", "98% used.")
    mail_managers("New order", "Order 42.")
    with override_settings(SERVER_EMAIL="errors@example.org"):
        mail_admins("Disk full again", "99% used.", fail_silently=True)
        EmailMessage("Hi", "Text.", "errors@example.org", ["ada@example.com"]).send()
    assert _stored(db_url) == ["ops@example.com", "boss@example.com", "ops@example.com", "ada@example.com"]


@override_settings(ADMINS=ADMINS)
def test_djangos_error_reports_reach_the_admins(django_db: str, db_url: str) -> None:
    """AdminEmailHandler mails an error logged by Django with fail_silently=True, from SERVER_EMAIL."""
    handler = AdminEmailHandler()
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord(
            "django.request", logging.ERROR, __file__, 1, "Failed: %s", ("/x",), sys.exc_info()
        )
    handler.emit(record)
    assert _stored(db_url) == ["ops@example.com"]


def test_a_refused_attachment_raises_and_writes_nothing(django_db: str, db_url: str) -> None:
    message = EmailMessage("Hi", "Text.", None, ["ada@example.com"])
    message.attach("C:\\Users\\ada\\invoice.txt", "42", "text/plain")
    with pytest.raises(mailroom.ValidationError, match="never a path"):
        EmailBackend().send_messages([EmailMessage("Hi", "Text.", None, ["bob@example.com"]), message])
    assert EmailBackend(fail_silently=True).send_messages([message]) == 0
    assert _stored(db_url) == []


def test_attachments_and_an_inline_image_are_stored_as_files(django_db: str, db_url: str) -> None:
    message = EmailMultiAlternatives("Receipt", "Attached.", None, ["ada@example.com"])
    message.attach_alternative('<p><img src="cid:logo"> Thanks</p>', "text/html")
    message.attach("invoice.pdf", PDF_BYTES, "application/pdf")
    message.attach("note.txt", "Grüße", "text/plain")  # text: encoded in DEFAULT_CHARSET
    logo = MIMEImage(PNG_BYTES, "png")
    logo.add_header("Content-ID", "<logo>")
    message.attach(logo)
    assert message.send() == 1
    with psycopg.connect(db_url) as conn:
        files = conn.execute(
            "SELECT a.position, a.filename, a.content_type, a.content_id, c.content"
            " FROM mailroom.email_attachments a JOIN mailroom.attachment_contents c ON c.sha256 = a.sha256"
            " ORDER BY a.position"
        ).fetchall()
    assert [(p, n, t, i, bytes(c)) for p, n, t, i, c in files] == [
        (1, "invoice.pdf", "application/pdf", None, PDF_BYTES),
        (2, "note.txt", "text/plain", None, "Grüße".encode()),
        (3, "logo", "image/png", "logo", PNG_BYTES),
    ]


@pytest.mark.parametrize(
    ("field", "name"), [("to", "To"), ("cc", "Cc"), ("bcc", "Bcc"), ("reply_to", "Reply-To")]
)
def test_an_entry_of_two_addresses_is_refused_not_cut(
    django_db: str, db_url: str, field: str, name: str
) -> None:
    """Each entry of a recipient list is one address, as Django requires: the second is not dropped."""
    entry = "Alice <alice@example.com>, bob@example.com"
    lists: dict[str, list[str]] = {"to": ["ada@example.com"], field: [entry, "carol@example.com"]}
    message = EmailMessage("Hi", "Text.", None, **lists)
    with pytest.raises(
        ValueError, match=re.escape(f"each {name} entry must be exactly one address, not 2: {entry!r}")
    ):
        message.send()
    assert EmailBackend(fail_silently=True).send_messages([message]) == 0
    assert _stored(db_url) == []


def test_every_address_of_the_to_list_is_kept(django_db: str, db_url: str) -> None:
    to = ["Alice <alice@example.com>", '"Doe, Bob" <bob@example.com>', "carol@example.com"]
    assert EmailMessage("Hi", "Text.", None, to, cc=["Dan <dan@example.com>"]).send() == 1
    with psycopg.connect(db_url) as owner:
        row = owner.execute(
            "SELECT recipient_email, recipient_name, to_extra, cc FROM mailroom.email_queue"
        ).fetchone()
    assert row == (
        "alice@example.com",
        "Alice",
        ["bob@example.com", "carol@example.com"],
        ["dan@example.com"],
    )


def test_a_to_header_differing_from_the_recipients_is_refused(django_db: str, db_url: str) -> None:
    message = EmailMessage("Hi", "Text.", None, ["ada@example.com"], headers={"To": "bob@example.com"})
    with pytest.raises(ValueError, match="To header"):
        message.send()
    assert _stored(db_url) == []


@pytest.fixture
def no_grant(request: pytest.FixtureRequest, db_url: str) -> Iterator[str]:
    """Django connected as a role that may log in and nothing else (no `mailroom db grant`)."""
    request.getfixturevalue("role_lock")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE mr_django_none LOGIN")
    try:
        with _point_django_at(role_url(db_url, "mr_django_none")):
            yield db_url
    finally:
        drop_roles(db_url, "mr_django_none")


def test_a_database_error_comes_out_as_djangos(no_grant: str, db_url: str) -> None:
    with pytest.raises(DatabaseError) as failed:
        send_mail("Hi", "Text.", None, ["ada@example.com"])
    assert isinstance(failed.value, ProgrammingError)  # permission denied for schema mailroom
    assert isinstance(failed.value.__cause__, psycopg.Error)
    assert send_mail("Hi", "Text.", None, ["ada@example.com"], fail_silently=True) == 0
    with transaction.atomic():  # the savepoint took the failure: the caller's transaction goes on
        assert send_mail("Hi", "Text.", None, ["ada@example.com"], fail_silently=True) == 0
        assert connections["default"].cursor().execute("SELECT 1") is not None
    assert _stored(db_url) == []


def test_the_backend_writes_on_the_alias_it_is_given(django_db: str, db_url: str) -> None:
    backend = mail.get_connection(using="default")
    assert isinstance(backend, EmailBackend) and backend.using == "default"
    message = EmailMessage("Hi", "Text.", None, ["a@example.com"])
    with pytest.raises(ConnectionDoesNotExist, match="other"):
        EmailBackend(using="other").send_messages([message])
    with pytest.raises(
        TypeError, match="needs database 'lite' on Django's PostgreSQL backend with psycopg 3"
    ):
        EmailBackend(using="lite").send_messages([message])
    connections["lite"].close()
    assert _stored(db_url) == []


PDF_BYTES = b"%PDF-1.4\n" + bytes(range(256)) * 4 + b"%%EOF\n"
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + bytes(64)


def test_a_django_message_is_delivered_with_its_html_alternative(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    with _point_django_at(db_url):
        message = EmailMultiAlternatives("Welcome", "Plain welcome.", None, ["ada@example.com"])
        message.attach_alternative("<p>HTML welcome</p>", "text/html")
        message.attach("invoice.pdf", PDF_BYTES, "application/pdf")
        with transaction.atomic():
            assert message.send() == 1
    assert asyncio.run(run_until_drained(db_url, settings)) == 1
    [received] = smtp_sink.messages
    assert received.message["Subject"] == "Welcome"
    assert received.message["From"].endswith(FROM + ">") or received.message["From"] == FROM
    plain, html = received.message.get_body(("plain",)), received.message.get_body(("html",))
    assert plain is not None and "Plain welcome." in plain.get_content()
    assert html is not None and "<p>HTML welcome</p>" in html.get_content()
    [invoice] = [part for part in received.message.walk() if part.get_filename() == "invoice.pdf"]
    assert invoice.get_content_type() == "application/pdf" and invoice.get_payload(decode=True) == PDF_BYTES


def test_headers_name_the_stream_and_the_lifetime_and_are_not_sent(django_db: str, db_url: str) -> None:
    headers = {"X-Mailroom-Stream": "codes", "X-Mailroom-Expires-At": "2099-01-01T00:00:00+00:00"}
    assert EmailMessage("Code", "123", None, ["ada@example.com"], headers=headers).send() == 1
    with pytest.raises(ValueError, match="give the offset too"):
        EmailMessage(
            "Code", "1", None, ["b@example.com"], headers={"X-Mailroom-Expires-At": "2099-01-01"}
        ).send()
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT stream, expires_at, headers FROM mailroom.email_queue").fetchone()
    assert row is not None and row[0] == "codes" and row[1].year == 2099 and row[2] == {}


def test_an_email_is_cancelled_by_its_key_on_djangos_connection(django_db: str, db_url: str) -> None:
    from django.db import connection

    key = {"X-Mailroom-Idempotency-Key": "order-7-reminder"}
    assert EmailMessage("Reminder", "Pay.", None, ["ada@example.com"], headers=key).send() == 1
    with transaction.atomic():
        connection.ensure_connection()
        found = mailroom.cancel(connection.connection, idempotency_key="order-7-reminder")
    assert found is not None and found.cancelled
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT status FROM mailroom.email_queue").fetchall() == [("cancelled",)]
