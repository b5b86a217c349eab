"""The SQL enqueue API: `mailroom.enqueue(...)` inside the caller's transaction, idempotent, stored as
the Python API stores it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue

_CALL = (
    "SELECT mailroom.enqueue(recipients => ARRAY[%s], subject => %s, text_body => %s, html_body => %s,"
    " to_name => %s, headers => %s::jsonb, idempotency_key => %s, scheduled_for => %s, priority => %s,"
    " max_retries => %s, reference_type => %s, reference_id => %s) AS id"
)
_SELECT_COMPARED = (
    "SELECT recipient_email, recipient_name, subject, text_body, html_body, headers, priority, scheduled_for,"
    " max_retries, idempotency_key, transactional, reference_type, reference_id, status, to_extra, cc, bcc"
    " FROM mailroom.email_queue WHERE id = %s"
)


def _row(conn: psycopg.Connection[Any], email_id: int) -> dict[str, Any]:
    row = conn.execute(_SELECT_COMPARED, (email_id,)).fetchone()
    assert row is not None
    return dict(row)


def test_the_function_stores_what_the_python_api_stores(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    args = ("ada@Example.COM", "Your order", "Thanks", "<p>Thanks</p>", "Ada Lovelace", '{"X-Order": "42"}',
            "order-42-sql", when, 5, 3, "order", "42")  # fmt: skip
    from_sql = conn.execute(_CALL, args).fetchone()
    assert from_sql is not None
    from_python = enqueue(
        conn,
        EmailRequest(to="ada@Example.COM", subject="Your order", text="Thanks", html="<p>Thanks</p>",
                     to_name="Ada Lovelace", headers={"X-Order": "42"}, idempotency_key="order-42-py",
                     scheduled_for=when, priority=5, max_retries=3, reference_type="order", reference_id="42"),
        settings=settings,
    )  # fmt: skip
    stored_sql, stored_python = _row(conn, from_sql["id"]), _row(conn, from_python)
    assert stored_sql.pop("idempotency_key") == "order-42-sql"
    assert stored_python.pop("idempotency_key") == "order-42-py"
    assert stored_sql == stored_python
    assert stored_sql["recipient_email"] == "ada@example.com"


def test_the_same_idempotency_key_returns_the_first_id_and_stores_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    args = ("ada@example.com", "Hi", "one", None, None, "{}", "signup-7", None, 0, None, None, None)
    first = conn.execute(_CALL, args).fetchone()
    again = conn.execute(_CALL, ("bob@example.com", "Other", "two", *args[3:])).fetchone()
    assert first is not None and again is not None and first["id"] == again["id"]
    count = conn.execute("SELECT count(*) AS n FROM mailroom.email_queue").fetchone()
    assert count == {"n": 1}


def test_the_email_exists_exactly_when_the_callers_transaction_commits(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("CREATE TABLE public.orders (id int)")
        conn.commit()
        with conn.transaction():
            conn.execute("INSERT INTO public.orders VALUES (1)")
            conn.execute("SELECT mailroom.enqueue(ARRAY['ada@example.com'], 'Order 1', 'Thanks')")
        try:
            with conn.transaction():
                conn.execute("INSERT INTO public.orders VALUES (2)")
                conn.execute("SELECT mailroom.enqueue(ARRAY['bob@example.com'], 'Order 2', 'Thanks')")
                raise psycopg.Rollback
        finally:
            rows = conn.execute("SELECT recipient_email FROM mailroom.email_queue").fetchall()
    assert rows == [("ada@example.com",)]


def test_a_refused_call_names_the_field_in_the_diagnostics(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        conn.execute("SELECT mailroom.enqueue(ARRAY['ada@example.com'], 'Hi', 'b', cc => ARRAY['x@@y'])")
    assert caught.value.sqlstate == "23514"
    assert caught.value.diag.column_name == "cc"
    assert str(caught.value).startswith("cc[1]: invalid email address")


def test_the_function_wakes_the_worker_like_any_insert(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN mailroom_queue")
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("SELECT mailroom.enqueue(ARRAY['ada@example.com'], 'Hi', 'b')")
        notices = list(listener.notifies(timeout=5, stop_after=1))
    assert [n.payload for n in notices] == ["insert"]
