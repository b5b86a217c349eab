"""Enqueue: inside the caller's transaction, idempotent, and strict about what becomes a header."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import default
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from worker.core.config import Settings
from worker.core.copy_rows import insert_batch
from worker.core.message import build_message
from worker.core.outbox import EmailRequest, enqueue, enqueue_async, prepare
from worker.core.templates import TemplateCatalog, builtin_templates
from worker.core.validation import ValidationError

ACTIVATION_DATA = {
    "login": "bob",
    "code": "01234",
    "expires_at": "10:15 UTC",
    "link": "https://app.example/a?x=1",
}


def _count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) AS n FROM mailroom.email_queue").fetchone()
    assert row is not None
    return int(row["n"])


def test_enqueue_commits_with_the_callers_transaction(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    with conn.transaction():
        email_id = enqueue(
            conn, EmailRequest(to="a@example.com", subject="Hi", text="Body"), settings=settings
        )
        conn.execute("SELECT 1")
    assert email_id > 0
    assert _count(conn) == 1


def test_enqueue_rolls_back_with_the_callers_transaction(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    class Boom(Exception):
        pass

    def enqueue_then_fail() -> None:
        with conn.transaction():
            enqueue(conn, EmailRequest(to="a@example.com", subject="Hi", text="Body"), settings=settings)
            raise Boom

    with pytest.raises(Boom):
        enqueue_then_fail()
    assert _count(conn) == 0


def test_same_idempotency_key_returns_first_id_and_stores_nothing_new(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    first = enqueue(
        conn, EmailRequest(to="a@example.com", subject="1", text="b", idempotency_key="k"), settings=settings
    )
    again = enqueue(
        conn, EmailRequest(to="z@example.com", subject="2", text="c", idempotency_key="k"), settings=settings
    )
    assert first == again
    assert _count(conn) == 1


async def test_async_enqueue_inside_application_transaction(db_url: str, settings: Settings) -> None:
    async with await psycopg.AsyncConnection.connect(db_url) as aconn:
        async with aconn.transaction():
            email_id = await enqueue_async(
                aconn,
                EmailRequest(to="a@example.com", template="activation", data=ACTIVATION_DATA),
                settings=settings,
            )
        cur = await aconn.execute(
            "SELECT subject, template, locale FROM mailroom.email_queue WHERE id = %s", (email_id,)
        )
        row = await cur.fetchone()
    assert row == ("Activate your account, bob", "activation", "en")


def test_template_renders_with_autoescaped_html_and_locale_fallback(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    data = {**ACTIVATION_DATA, "login": "<b>eve</b>"}
    email_id = enqueue(
        conn,
        EmailRequest(to="a@example.com", template="activation", locale="fr-CA", data=data),
        settings=settings,
    )
    row = conn.execute(
        "SELECT subject, text_body, html_body, locale, template_data FROM mailroom.email_queue WHERE id = %s",
        (email_id,),
    ).fetchone()
    assert row is not None
    assert row["locale"] == "fr"
    assert row["subject"] == "Activez votre compte, <b>eve</b>"
    assert "&lt;b&gt;eve&lt;/b&gt;" in row["html_body"]
    assert "<b>eve</b>" in row["text_body"]
    assert row["template_data"] == data


def test_template_stored_in_database_overrides_builtin(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    conn.execute(
        "INSERT INTO mailroom.templates (name, locale, subject, text_body) VALUES ('activation', 'en', 'Yo {{ login }}', 'x')"
    )
    email_id = enqueue(
        conn, EmailRequest(to="a@example.com", template="activation", data=ACTIVATION_DATA), settings=settings
    )
    row = conn.execute("SELECT subject FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
    assert row is not None and row["subject"] == "Yo bob"


BAD: list[tuple[EmailRequest, str]] = [
    (EmailRequest(to="not-an-address", subject="s", text="b"), "to"),
    (EmailRequest(to="a@example.com\r\nBcc: x@evil.example", subject="s", text="b"), "to"),
    (EmailRequest(to="a@example.com", subject="hi\r\nBcc: x@evil.example", text="b"), "subject"),
    (EmailRequest(to="a@example.com", subject="hi\x00", text="b"), "subject"),
    (EmailRequest(to="a@example.com", subject="=?UTF-8?Q?=0A?=Bcc: x@evil.example", text="b"), "subject"),
    (EmailRequest(to="a@example.com", subject="=?UTF-8?B?aGkKQmNjOiB4?=", text="b"), "subject"),
    (EmailRequest(to="a@example.com", subject="line\u2028separator", text="b"), "subject"),
    (EmailRequest(to="a@example.com", to_name="Eve\nBcc: x", subject="s", text="b"), "to_name"),
    (
        EmailRequest(to="a@example.com", subject="s", text="b", headers={"X-Tag": "a\r\nBcc: x"}),
        "headers.X-Tag",
    ),
    (
        EmailRequest(to="a@example.com", subject="s", text="b", headers={"Bcc": "x@evil.example"}),
        "headers.Bcc",
    ),
    (EmailRequest(to="a@example.com", subject="s", text="b", headers={"Bad Name": "v"}), "headers.Bad Name"),
    (EmailRequest(to="a@example.com", subject="s"), "text"),
    (EmailRequest(to="a@example.com", subject="s", text="   "), "text"),
    (EmailRequest(to="a@example.com", text="b"), "subject"),
    (EmailRequest(to="a@example.com", subject="x" * 999, text="b"), "subject"),
    (EmailRequest(to="a@example.com", subject="s", text="b" * (10 * 1024 * 1024 + 1)), "text"),
    (EmailRequest(to="a@example.com", template="no_such_template", data={}), "template"),
    (EmailRequest(to="a@example.com", template="activation", locale="zz", data=ACTIVATION_DATA), "locale"),
    (
        EmailRequest(to="a@example.com", template="activation", locale="english", data=ACTIVATION_DATA),
        "locale",
    ),
    (EmailRequest(to="a@example.com", template="activation", data={"login": "x"}), "data"),
    (EmailRequest(to="a@example.com", subject="s", text="b", priority=5000), "priority"),
]


@pytest.mark.parametrize(("request_", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_input_is_rejected_naming_the_field_and_nothing_is_stored(
    conn: psycopg.Connection[Any], settings: Settings, request_: EmailRequest, field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        enqueue(conn, request_, settings=settings)
    assert caught.value.field == field
    conn.rollback()
    assert _count(conn) == 0


def test_bulk_batch_resolves_repeated_keys_to_the_first_email(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    catalog = TemplateCatalog(builtin_templates())
    rows = [
        prepare(
            EmailRequest(to=f"u{i}@example.com", subject="s", text="b", idempotency_key=f"k{i % 3}"),
            catalog,
            settings,
        )
        for i in range(6)
    ] + [prepare(EmailRequest(to="plain@example.com", subject="s", text="b"), catalog, settings)]
    ids = insert_batch(conn, rows)
    assert ids[0] == ids[3] and ids[1] == ids[4] and ids[2] == ids[5]
    assert len(set(ids)) == 4
    assert _count(conn) == 4
    again = insert_batch(conn, rows[:3])
    assert again == ids[:3]
    assert _count(conn) == 4


HEADER_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["=?UTF-8?Q?=0A?=Bcc: x@y.z", "a\r\nBcc: x", "\x85", "=?utf-8?b?DQo=?=", "ok =?utf-8?q?caf=C3=A9?="]
)


@hyp_settings(
    max_examples=150,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),  # CI runs the same examples every time; local runs explore
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    to=st.one_of(st.emails(), HEADER_TEXT),
    to_name=st.one_of(st.none(), HEADER_TEXT),
    subject=HEADER_TEXT,
    text=st.text(max_size=200),
    header_value=HEADER_TEXT,
)
def test_hostile_input_is_either_rejected_or_stored_and_renders_to_a_wellformed_message(
    conn: psycopg.Connection[Any],
    settings: Settings,
    to: str,
    to_name: str | None,
    subject: str,
    text: str,
    header_value: str,
) -> None:
    request = EmailRequest(
        to=to, to_name=to_name, subject=subject, text=text, headers={"X-Campaign-Tag": header_value}
    )
    try:
        with conn.transaction():
            email_id = enqueue(conn, request, settings=settings)
            row = conn.execute("SELECT * FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
            raise psycopg.Rollback
    except ValidationError:
        return
    assert row is not None
    envelope = build_message(row, "sender@example.org", "Mailroom")
    parsed = BytesParser(policy=default).parsebytes(envelope.content)
    assert sorted(k.lower() for k in parsed) == sorted(
        [
            "from",
            "to",
            "subject",
            "date",
            "message-id",
            "x-campaign-tag",
            "mime-version",
            "content-type",
            "content-transfer-encoding",
        ]
    )
    assert parsed["Subject"] == row["subject"]
    assert parsed["To"].addresses[0].addr_spec == row["recipient_email"]
    assert parsed["Message-ID"] == envelope.message_id
    assert parsed.get_content_type() == "text/plain"
    stored_text = row["text_body"].replace("\r\n", "\n").replace("\r", "\n")
    # On the wire every line ends in CRLF; the receiver sees the stored text with that line ending.
    assert parsed.get_content().replace("\r\n", "\n").rstrip("\n") == stored_text.rstrip("\n")


def test_bulk_copy_stores_backslashes_tabs_and_line_breaks_exactly(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    catalog = TemplateCatalog(builtin_templates())
    text = "C:\\new\\table\tcol\r\nline two\\N \\\\ end\n"
    row = prepare(
        EmailRequest(
            to="a@example.com",
            subject="Tab\\and slash",
            text=text,
            html="<p>\\n</p>",
            headers={"X-Path": "C:\\temp"},
            scheduled_for=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
        ),
        catalog,
        settings,
    )
    [email_id] = insert_batch(conn, [row])
    stored = conn.execute(
        "SELECT subject, text_body, html_body, headers, scheduled_for FROM mailroom.email_queue WHERE id = %s",
        (email_id,),
    ).fetchone()
    assert stored == {
        "subject": "Tab\\and slash",
        "text_body": text,
        "html_body": "<p>\\n</p>",
        "headers": {"X-Path": "C:\\temp"},
        "scheduled_for": datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
    }
