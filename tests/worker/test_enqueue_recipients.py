"""Many recipients on the way in: Python API, JSON lines, bulk COPY and the SQL function store the same."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from worker.core.config import Settings
from worker.core.copy_rows import insert_batch
from worker.core.outbox import EmailRequest, enqueue, prepare_json
from worker.core.validation import ValidationError

_SELECT = "SELECT recipient_email, to_extra, cc, bcc, reply_to FROM mailroom.email_queue WHERE id = %s"


def _stored(conn: psycopg.Connection[Any], email_id: int) -> dict[str, Any]:
    row = conn.execute(_SELECT, (email_id,)).fetchone()
    assert row is not None
    return dict(row)


EXPECTED = {
    "recipient_email": "ada@example.com",
    "to_extra": ["bob@example.com"],
    "cc": ["carol@example.org"],
    "bcc": ["dave@example.net", "erin@example.net"],
    "reply_to": ["support@example.com"],
}


def test_the_python_api_stores_every_recipient_list_normalised(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    email_id = enqueue(
        conn,
        EmailRequest(
            to=["ada@example.com", "bob@EXAMPLE.com"],
            cc=["carol@example.org"],
            bcc=["dave@example.net", "erin@example.net"],
            reply_to=["support@example.com"],
            subject="Hi",
            text="body",
        ),
        settings=settings,
    )
    assert _stored(conn, email_id) == EXPECTED


def test_the_sql_function_stores_the_same_as_the_python_api(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(
        "SELECT mailroom.enqueue(recipients => ARRAY['ada@example.com', ' bob@EXAMPLE.com'],"
        " cc => ARRAY['carol@example.org'], bcc => ARRAY['dave@example.net', 'erin@example.net'],"
        " reply_to => ARRAY['support@example.com'], subject => ' Hi ', text_body => 'body') AS id"
    ).fetchone()
    assert row is not None
    assert _stored(conn, row["id"]) == EXPECTED
    subject = conn.execute("SELECT subject FROM mailroom.email_queue WHERE id = %s", (row["id"],)).fetchone()
    assert subject == {"subject": "Hi"}


def test_bulk_copy_stores_recipient_lists(db_url: str, settings: Settings) -> None:
    line = {
        "to": ["ada@example.com", "bob@example.com"],
        "cc": "carol@example.org",
        "bcc": ["dave@example.net", "erin@example.net"],
        "reply_to": ["support@example.com"],
        "subject": "Hi",
        "text": "body",
    }
    with psycopg.connect(db_url) as conn:
        ids = insert_batch(conn, [prepare_json(line, None, settings)])
        conn.commit()
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        assert _stored(conn, ids[0]) == EXPECTED


def test_one_address_in_a_list_field_is_taken_as_a_list(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    row = prepare_json(
        {"to": "ada@example.com", "cc": "carol@example.org", "subject": "s", "text": "b"}, None, settings
    )
    assert "carol@example.org" in [v for v in row if isinstance(v, list) for v in v]


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"to": []}, "to"),
        ({"to": ["ada@example.com", "nope"]}, "to[1]"),
        ({"cc": ["fine@example.com", "x@@y"]}, "cc[2]"),
        ({"bcc": ["a\r\nb@example.com"]}, "bcc[1]"),
        ({"reply_to": ["not an address"]}, "reply_to[1]"),
        ({"bcc": [f"r{i}@example.com" for i in range(50)]}, "to"),
    ],
)
def test_a_bad_recipient_list_is_refused_naming_the_element(
    settings: Settings, request_fields: dict[str, Any], field: str
) -> None:
    fields: dict[str, Any] = {"to": "ada@example.com", "subject": "s", "text": "b", **request_fields}
    with pytest.raises(ValidationError) as caught:
        prepare_json(fields, None, settings)
    assert caught.value.field == field


def test_a_list_field_of_the_wrong_type_is_that_lines_error(settings: Settings) -> None:
    with pytest.raises(ValidationError, match="cc: must be an address or a list of addresses"):
        prepare_json({"to": "ada@example.com", "cc": [1], "subject": "s", "text": "b"}, None, settings)


def test_the_recipient_limit_is_a_setting_below_the_databases_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from worker.core.config import ConfigError

    monkeypatch.setenv("MAILROOM_MAX_RECIPIENTS", "101")
    with pytest.raises(ConfigError, match="at most 100"):
        Settings.from_env()
    monkeypatch.setenv("MAILROOM_MAX_RECIPIENTS", "3")
    assert Settings.from_env().max_recipients == 3
