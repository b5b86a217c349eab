"""Templates from SQL: `mailroom.enqueue(template => ...)` stores the email unrendered; the worker's renderer
renders it with the Python API's catalog and sandbox before any claim can see it."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.producers.rendering import render_once

_DATA = '{"login": "bob", "code": "01234", "expires_at": "10:15 UTC", "link": "https://app.example/a?x=1"}'


def _enqueue(conn: psycopg.Connection[Any], extra: str = "", template: str = "activation") -> int:
    row = conn.execute(
        "SELECT mailroom.enqueue(ARRAY['bob@example.com'], template => %s, template_data => %s::jsonb"
        + extra
        + ")",
        (template, _DATA),
    ).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def _render(db_url: str, settings: Settings) -> int:
    async def go() -> int:
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            return await render_once(conn, settings)

    return asyncio.run(go())


def _email(db_url: str, email_id: int) -> dict[str, Any]:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT status, subject, text_body, html_body, locale, last_error FROM mailroom.email_queue WHERE id = %s",
            (email_id,),
        ).fetchone()
    assert row is not None
    return row


def test_an_email_enqueued_with_a_template_is_rendered_as_the_python_api_renders_it(
    db_url: str, settings: Settings
) -> None:
    with psycopg.connect(db_url) as conn:
        from_sql = _enqueue(conn, ", locale => 'fr'")
        assert _email(db_url, from_sql)["status"] == "unrendered"
        from_python = enqueue(
            conn,
            EmailRequest(to="bob@example.com", template="activation", locale="fr",
                         data={"login": "bob", "code": "01234", "expires_at": "10:15 UTC",
                               "link": "https://app.example/a?x=1"}),
            settings=settings,
        )  # fmt: skip
        conn.commit()
    assert _render(db_url, settings) == 1
    rendered, expected = _email(db_url, from_sql), _email(db_url, from_python)
    assert rendered == expected
    assert rendered["status"] == "pending" and "bob" in rendered["subject"]


def test_a_subject_given_beside_the_template_wins(db_url: str, settings: Settings) -> None:
    with psycopg.connect(db_url) as conn:
        email_id = _enqueue(conn, ", subject => 'Welcome aboard'")
    _render(db_url, settings)
    assert _email(db_url, email_id)["subject"] == "Welcome aboard"


def test_an_unknown_template_or_missing_data_fails_the_email_with_the_reason(
    db_url: str, settings: Settings
) -> None:
    with psycopg.connect(db_url) as conn:
        unknown = _enqueue(conn, template="no_such_template")
        missing = conn.execute(
            "SELECT mailroom.enqueue(ARRAY['bob@example.com'], template => 'activation', template_data => '{}')"
        ).fetchone()
        good = _enqueue(conn)
        conn.commit()
    assert missing is not None
    assert _render(db_url, settings) == 3
    assert _email(db_url, unknown)["status"] == "failed"
    assert "no_such_template" in _email(db_url, unknown)["last_error"]
    assert _email(db_url, missing[0])["status"] == "failed"
    assert (
        "login" in _email(db_url, missing[0])["last_error"]
        or "undefined" in _email(db_url, missing[0])["last_error"]
    )
    assert _email(db_url, good)["status"] == "pending"


def test_a_rendered_subject_the_rules_refuse_fails_the_email_not_the_batch(
    db_url: str, settings: Settings
) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.templates (name, locale, subject, text_body) VALUES"
            " ('sneaky', 'en', '{{ s }}', 'body')"
        )
        bad = conn.execute(
            "SELECT mailroom.enqueue(ARRAY['bob@example.com'], template => 'sneaky',"
            ' template_data => \'{"s": "Hi\\r\\nBcc: victim@example.com"}\')'
        ).fetchone()
        good = _enqueue(conn)
    assert bad is not None
    assert _render(db_url, settings) == 2
    assert _email(db_url, bad[0])["status"] == "failed"
    assert _email(db_url, good)["status"] == "pending"


def test_unrendered_email_is_never_claimed(db_url: str, settings: Settings) -> None:
    with psycopg.connect(db_url) as conn:
        _enqueue(conn)
        due = conn.execute(
            "SELECT count(*) FROM mailroom.email_queue WHERE status = 'pending' AND scheduled_for <= now()"
        ).fetchone()
    assert due == (0,)


def test_retrying_an_email_whose_template_failed_renders_it_again(db_url: str, settings: Settings) -> None:
    with psycopg.connect(db_url) as conn:
        email_id = _enqueue(conn, template="welcome_later")
    _render(db_url, settings)
    assert _email(db_url, email_id)["status"] == "failed"
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.templates (name, locale, subject, text_body) VALUES"
            " ('welcome_later', 'en', 'Welcome {{ login }}', 'Hello')"
        )
        conn.execute("UPDATE mailroom.email_queue SET status = 'pending' WHERE id = %s", (email_id,))
        conn.commit()
        assert _email(db_url, email_id)["status"] == "unrendered"
    _render(db_url, settings)
    assert _email(db_url, email_id)["status"] == "pending"
    assert _email(db_url, email_id)["subject"] == "Welcome bob"
