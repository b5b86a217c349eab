"""One rule set for every writer: the hostile corpus through Python, plain INSERT, UPDATE, COPY and
`mailroom.enqueue(...)`; the database enforces the specification Python reads."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.rows import dict_row

from tests.fixtures_db import create_database, drop_database
from tests.worker.helpers import BYPASS_RULES
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.core.rules import rules
from worker.core.validation import ValidationError


@pytest.fixture(scope="module")
def rules_db(pg_admin_url: str, template_db: str) -> Iterator[str]:
    """One database for the whole corpus: every case runs in a transaction that is rolled back."""
    url = create_database(pg_admin_url, template_db)
    yield url
    drop_database(pg_admin_url, url)


@pytest.fixture
def conn(rules_db: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """A connection to the module's database whose work is rolled back at the end of the test."""
    with psycopg.connect(rules_db, row_factory=dict_row) as connection:
        yield connection
        connection.rollback()


@pytest.fixture
def settings(rules_db: str, tmp_path: Path, secret_key: str) -> Settings:
    """Settings pointing at the module's database."""
    return Settings(home=tmp_path / "home", database_url=rules_db, secret_key=secret_key)


_B64_CRLF = base64.b64encode(b"x\r\nBcc: victim@example.com").decode()

# (field, value, what the refusal says): every case the Python validator refuses, written so each
# path can carry it. Fields: to, to_name, subject, header value (X-Note), header name.
HOSTILE: list[tuple[str, Any, str]] = [
    ("subject", "Hi\r\nBcc: victim@example.com", "control character"),
    ("subject", "Hi\nX: y", "control character"),
    ("subject", "Hi\rX", "control character"),
    ("subject", "tab\tinside", "control character"),
    ("subject", "next line\x85there", "control character"),
    ("subject", "line\u2028separator", "control character"),
    ("subject", "para\u2029separator", "control character"),
    ("subject", "vertical\x0btab", "control character"),
    ("subject", "form\x0cfeed", "control character"),
    ("subject", "delete\x7f", "control character"),
    ("subject", "=?utf-8?q?a=0D=0ABcc:_victim@example.com?=", "encoded word"),
    ("subject", f"=?utf-8?b?{_B64_CRLF}?=", "encoded word"),
    ("subject", "Hello =?iso-8859-1?q?caf=E9?= there", "encoded word"),
    ("subject", "x" * 999, "longer than 998"),
    ("subject", "   ", "subject is required"),
    ("to_name", "Ada\r\nBcc: victim@example.com", "control character"),
    ("to_name", "=?utf-8?q?Ada=0D=0AX:_1?=", "encoded word"),
    ("to_name", "n" * 256, "255"),
    ("header_value", "a\r\nBcc: victim@example.com", "control character"),
    ("header_value", "=?utf-8?q?a=0D=0AInjected:_1?=", "encoded word"),
    ("header_value", "v" * 999, "longer than 998"),
    ("header_name", "Bcc", "set by Mailroom"),
    ("header_name", "bcc", "set by Mailroom"),
    ("header_name", "To", "set by Mailroom"),
    ("header_name", "Reply-To", "set by Mailroom"),
    ("header_name", "Content-Type", "set by Mailroom"),
    ("header_name", "Message-ID", "set by Mailroom"),
    ("header_name", "Received", "set by Mailroom"),
    ("header_name", "DKIM-Signature", "set by Mailroom"),
    # Relay-control, trace and authentication headers: relays and readers trust them.
    ("header_name", "X-SMTPAPI", "relay-control"),
    ("header_name", "x-smtpapi", "relay-control"),
    ("header_name", "X-PM-Metadata-mailroom_email_id", "relay-control"),
    ("header_name", "Authentication-Results", "relay-control"),
    ("header_name", "Resent-From", "relay-control"),
    ("header_name", "ARC-Seal", "relay-control"),
    ("header_name", "X-Mailgun-Variables", "relay-control"),
    ("header_name", "X Bad", "not a valid header name"),
    ("header_name", "X:Bad", "not a valid header name"),
    ("header_name", "X-\u00e9", "not a valid header name"),
    ("header_name", "X" * 77, "not a valid header name"),
    ("to", "not an address", "invalid email address"),
    ("to", "a b@example.com", "invalid email address"),
    ("to", "<a@example.com>", "invalid email address"),
    ("to", "a@example.com\r\nRCPT TO:<b@example.net>", "invalid email address"),
    ("to", "a@-example.com", "invalid email address"),
    ("to", "\u00fc@example.com", "invalid email address"),
    ("to", "a@[127.0.0.1]", "invalid email address"),
    ("to", '"quoted"@example.com', "invalid email address"),
    ("to", "l" * 65 + "@example.com", "invalid email address"),
    ("to", "a@localhost", "invalid email address"),
    ("to", "a@" + "d" * 64 + ".com", "invalid email address"),
]
IDS = [f"{field}-{i}" for i, (field, _, _) in enumerate(HOSTILE)]

_ROW = {"recipient_email": "ada@example.com", "recipient_name": None, "subject": "Hi", "headers": {}}


def _row(field: str, value: Any) -> dict[str, Any]:
    row = dict(_ROW)
    if field == "to":
        row["recipient_email"] = value
    elif field == "to_name":
        row["recipient_name"] = value
    elif field == "subject":
        row["subject"] = value
    elif field == "header_value":
        row["headers"] = {"X-Note": value}
    else:
        row["headers"] = {value: "x"}
    return row


def _request(field: str, value: Any) -> EmailRequest:
    row = _row(field, value)
    return EmailRequest(
        to=row["recipient_email"],
        to_name=row["recipient_name"],
        subject=row["subject"],
        text="body",
        headers=row["headers"],
    )


def _refused_by_database(conn: psycopg.Connection[Any], statement: str, params: Any) -> str:
    with pytest.raises(errors.CheckViolation) as caught, conn.transaction():
        conn.execute(statement, params)
    return str(caught.value)


@pytest.mark.parametrize(("field", "value", "reason"), HOSTILE, ids=IDS)
def test_the_python_api_refuses_the_hostile_case(
    conn: psycopg.Connection[Any], settings: Settings, field: str, value: Any, reason: str
) -> None:
    with pytest.raises(ValidationError):
        enqueue(conn, _request(field, value), settings=settings)


@pytest.mark.parametrize(("field", "value", "reason"), HOSTILE, ids=IDS)
def test_a_plain_insert_of_the_hostile_case_is_refused_naming_the_field(
    conn: psycopg.Connection[Any], field: str, value: Any, reason: str
) -> None:
    row = _row(field, value)
    message = _refused_by_database(
        conn,
        "INSERT INTO mailroom.email_queue (recipient_email, recipient_name, subject, text_body, headers)"
        " VALUES (%s, %s, %s, 'body', %s::jsonb)",
        (row["recipient_email"], row["recipient_name"], row["subject"], json.dumps(row["headers"])),
    )
    expected_field = {"to": "recipient_email", "to_name": "recipient_name", "subject": "subject"}.get(
        field, "headers."
    )
    assert message.startswith(expected_field), message
    assert reason in message, message


@pytest.mark.parametrize(("field", "value", "reason"), HOSTILE, ids=IDS)
def test_an_update_to_the_hostile_case_is_refused(
    conn: psycopg.Connection[Any], field: str, value: Any, reason: str
) -> None:
    email_id = conn.execute(
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body) VALUES ('ada@example.com', 'Hi', 'b')"
        " RETURNING id"
    ).fetchone()["id"]  # type: ignore[index]
    row = _row(field, value)
    message = _refused_by_database(
        conn,
        "UPDATE mailroom.email_queue SET recipient_email = %s, recipient_name = %s, subject = %s,"
        " headers = %s::jsonb WHERE id = %s",
        (row["recipient_email"], row["recipient_name"], row["subject"], json.dumps(row["headers"]), email_id),
    )
    assert reason in message, message


@pytest.mark.parametrize(("field", "value", "reason"), HOSTILE, ids=IDS)
def test_the_sql_enqueue_function_refuses_the_hostile_case(
    conn: psycopg.Connection[Any], field: str, value: Any, reason: str
) -> None:
    row = _row(field, value)
    message = _refused_by_database(
        conn,
        "SELECT mailroom.enqueue(recipients => ARRAY[%s], to_name => %s, subject => %s, text_body => 'body',"
        " headers => %s::jsonb)",
        (row["recipient_email"], row["recipient_name"], row["subject"], json.dumps(row["headers"])),
    )
    assert reason in message, message


@pytest.mark.parametrize(("field", "value", "reason"), HOSTILE, ids=IDS)
def test_copy_of_the_hostile_case_is_refused(
    conn: psycopg.Connection[Any], field: str, value: Any, reason: str
) -> None:
    row = _row(field, value)
    with (
        pytest.raises(errors.CheckViolation, match=reason),
        conn.transaction(),
        conn.cursor().copy(
            "COPY mailroom.email_queue (recipient_email, recipient_name, subject, text_body, headers) FROM STDIN"
        ) as copy,
    ):
        copy.write_row(
            (
                row["recipient_email"],
                row["recipient_name"],
                row["subject"],
                "body",
                json.dumps(row["headers"]),
            )
        )


SQL_ONLY: list[tuple[str, str, str]] = [
    (
        "a header value that is a number",
        "headers => '{\"X-Count\": 3}'",
        "headers.X-Count: a header value must be text",
    ),
    (
        "a header value that is null",
        "headers => '{\"X-Null\": null}'",
        "headers.X-Null: a header value must be text",
    ),
    ("headers that are not an object", "headers => '[1, 2]'", "headers: must be a JSON object"),
    ("a bad cc address", "cc => ARRAY['fine@example.com', 'nope']", "cc[2]: invalid email address"),
    ("a NULL bcc address", "bcc => ARRAY[NULL]::text[]", "bcc[1]: an email address is required"),
    (
        "a bad second To",
        "recipients => ARRAY['ada@example.com', 'x@@y']",
        "to_extra[1]: invalid email address",
    ),
    ("a bad reply-to", "reply_to => ARRAY['a\u2028b@example.com']", "reply_to[1]: "),
    ("no recipient", "recipients => ARRAY[]::text[]", "recipients: at least one To address"),
    ("no body", "text_body => NULL", "text_body: a body is required"),
    ("a priority out of range", "priority => 5000", "priority: must be between"),
]


@pytest.mark.parametrize(("case", "argument", "message"), SQL_ONLY, ids=[c[0] for c in SQL_ONLY])
def test_the_sql_enqueue_function_names_the_field_of_what_only_sql_can_write(
    conn: psycopg.Connection[Any], case: str, argument: str, message: str
) -> None:
    args = {"recipients": "ARRAY['ada@example.com']", "subject": "'Hi'", "text_body": "'body'"}
    name = argument.split(" =>", 1)[0]
    args[name] = argument.split("=> ", 1)[1]
    call = ", ".join(f"{k} => {v}" for k, v in args.items())
    with pytest.raises((errors.CheckViolation, errors.InvalidParameterValue)) as caught, conn.transaction():
        conn.execute(f"SELECT mailroom.enqueue({call})")  # the test's own literals, no input
    assert str(caught.value).startswith(message), str(caught.value)
    assert caught.value.diag.column_name == message.split(":")[0].split("[")[0].split(".")[0]


def test_too_many_recipients_are_refused_by_the_database(conn: psycopg.Connection[Any]) -> None:
    many = [f"r{i}@example.com" for i in range(rules().max_recipients)]
    message = _refused_by_database(
        conn,
        "SELECT mailroom.enqueue(recipients => ARRAY['ada@example.com'], subject => 'Hi',"
        " text_body => 'b', bcc => %s)",
        (many,),
    )
    assert message.startswith(f"recipients: more than {rules().max_recipients} recipients")


def test_the_database_enforces_the_specification_python_reads(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("SELECT mailroom.content_rules() AS spec").fetchone()
    assert row is not None and row["spec"] == rules().spec


def test_status_changes_do_not_check_content_again(conn: psycopg.Connection[Any]) -> None:
    # A row that got past the rules (the trigger disabled by a superuser) can still be moved along by the worker.
    conn.execute(BYPASS_RULES)
    email_id = conn.execute(
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, headers)"
        " VALUES ('ada@example.com', 'Hi', 'b', '{\"X-Note\": \"=?utf-8?q?a=0D=0AX:_1?=\"}') RETURNING id"
    ).fetchone()["id"]  # type: ignore[index]
    conn.execute(BYPASS_RULES.replace("DISABLE", "ENABLE"))
    conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = %s", (email_id,))
    assert conn.execute("SELECT status FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone() == {
        "status": "cancelled"
    }


def test_a_local_part_of_64_characters_is_accepted_by_every_path(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    address = "l" * 64 + "@" + "d" * 63 + ".example.com"
    enqueue(conn, EmailRequest(to=address, subject="Hi", text="b"), settings=settings)
    conn.execute("SELECT mailroom.enqueue(ARRAY[%s], 'Hi', 'b')", (address,))
    assert conn.execute("SELECT count(*) AS n FROM mailroom.email_queue").fetchone() == {"n": 2}


def _reserved_names() -> list[str]:
    # Every listed name, and one name under each prefix, in the case an application would write.
    r = rules()
    names = sorted(r.relay_and_trace_headers) + [p + "x" for p in r.relay_and_trace_header_prefixes]
    return ["-".join(part.capitalize() for part in name.split("-")) for name in names]


@pytest.mark.parametrize("name", _reserved_names())
def test_every_relay_and_trace_header_is_refused_in_the_same_words_by_python_and_the_database(
    conn: psycopg.Connection[Any], settings: Settings, name: str
) -> None:
    with pytest.raises(ValidationError) as python:
        enqueue(
            conn,
            EmailRequest(to="ada@example.com", subject="Hi", text="b", headers={name: "1"}),
            settings=settings,
        )
    message = _refused_by_database(
        conn,
        "SELECT mailroom.enqueue(recipients => ARRAY['ada@example.com'], subject => 'Hi', text_body => 'b',"
        " headers => %s::jsonb)",
        (json.dumps({name: "1"}),),
    )
    assert str(python.value) == message.splitlines()[0]
    assert message.startswith(f"headers.{name}: a relay-control, trace or authentication header"), message


@pytest.mark.parametrize(
    "name", ["X-Order", "X-Entity-Ref-ID", "Feedback-ID", "X-Pmx", "Arcade", "Resentment"]
)
def test_an_ordinary_header_near_a_reserved_one_is_still_allowed(
    conn: psycopg.Connection[Any], settings: Settings, name: str
) -> None:
    request = EmailRequest(to="ada@example.com", subject="Hi", text="b", headers={name: "1"})
    assert enqueue(conn, request, settings=settings) > 0
    row = conn.execute(
        "SELECT mailroom.enqueue(recipients => ARRAY['ada@example.com'], subject => 'Hi', text_body => 'b',"
        " headers => %s::jsonb) AS id",
        (json.dumps({name: "1"}),),
    ).fetchone()
    assert row is not None and row["id"] > 0
