"""`mailroom.enqueue` and `mailroom.enqueue_many`: the caller's transaction decides, every refusal writes nothing."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest

import mailroom
from mailroom import EmailRequest


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public API reads `MAILROOM_*` itself: each test starts from the defaults."""
    for name in [n for n in os.environ if n.startswith("MAILROOM_")]:
        monkeypatch.delenv(name)


def _email(to: str | list[str] = "ada@example.com", **more: Any) -> EmailRequest:
    return EmailRequest(to=to, subject="Order 42 received", text="Thank you.", **more)


def _stored(db_url: str) -> list[tuple[Any, ...]]:
    """Committed queue rows (id, recipient, status), seen from another connection."""
    with psycopg.connect(db_url) as other:
        return other.execute(
            "SELECT id, recipient_email, status FROM mailroom.email_queue ORDER BY id"
        ).fetchall()


class OrderFailed(Exception):
    """The application's own failure, after it enqueued."""


def test_an_email_enqueued_in_a_transaction_that_rolls_back_leaves_nothing(db_url: str) -> None:
    def order_then_fail(conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            mailroom.enqueue(conn, _email())
            raise OrderFailed

    with psycopg.connect(db_url) as conn:
        with pytest.raises(OrderFailed):
            order_then_fail(conn)
        assert conn.execute("SELECT count(*) FROM mailroom.email_queue").fetchone() == (0,)
    assert _stored(db_url) == []


def test_an_email_enqueued_in_a_committed_transaction_is_one_pending_row(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        with conn.transaction():
            email_id = mailroom.enqueue(conn, _email())
            assert _stored(db_url) == []  # not before the caller commits
        row = conn.execute("SELECT subject, text_body FROM mailroom.email_queue").fetchone()
    assert _stored(db_url) == [(email_id, "ada@example.com", "pending")]
    assert row == ("Order 42 received", "Thank you.")


def test_enqueue_many_on_an_idle_connection_is_committed_by_the_caller_only(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        mailroom.enqueue_many(conn, [_email("a@example.com"), _email("b@example.com")])
        assert _stored(db_url) == []
        conn.rollback()
        ids = mailroom.enqueue_many(conn, [_email("c@example.com")])
        conn.commit()
    assert _stored(db_url) == [(ids[0], "c@example.com", "pending")]


def test_enqueue_many_returns_the_ids_in_the_order_of_the_requests(db_url: str) -> None:
    addresses = [f"u{n}@example.com" for n in (3, 1, 4, 1, 5, 9, 2, 6)]
    with psycopg.connect(db_url) as conn, conn.transaction():
        ids = mailroom.enqueue_many(conn, (_email(a) for a in addresses))
    stored = {email_id: to for email_id, to, _ in _stored(db_url)}
    assert len(set(ids)) == len(addresses)
    assert [stored[i] for i in ids] == addresses


def test_enqueue_many_gives_a_repeated_idempotency_key_the_first_emails_id(db_url: str) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        earlier = mailroom.enqueue(conn, _email(idempotency_key="order-41"))
        ids = mailroom.enqueue_many(
            conn,
            [
                _email("a@example.com", idempotency_key="order-42"),
                _email("b@example.com", idempotency_key="order-41"),
                _email("c@example.com", idempotency_key="order-42"),
                _email("d@example.com"),
            ],
        )
    assert ids[1] == earlier and ids[2] == ids[0]
    assert [to for _, to, _ in _stored(db_url)] == ["ada@example.com", "a@example.com", "d@example.com"]


def test_enqueue_many_of_nothing_writes_nothing(db_url: str) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        assert mailroom.enqueue_many(conn, []) == []
    assert _stored(db_url) == []


REFUSED: list[tuple[EmailRequest, str]] = [
    (_email("not-an-address"), "to"),
    (_email("ada@example.com\r\nBcc: eve@evil.example"), "to"),
    (EmailRequest(to="ada@example.com", subject="Hi\r\nBcc: eve@evil.example", text="b"), "subject"),
    (EmailRequest(to="ada@example.com", subject="Hi\nthere", text="b"), "subject"),
    (_email(headers={"X-Order": "42\r\nBcc: eve@evil.example"}), "headers.X-Order"),
    (_email(headers={"Bcc": "eve@evil.example"}), "headers.Bcc"),
    (_email(to_name="Ada\nBcc: eve@evil.example"), "to_name"),
    (_email([f"u{n}@example.com" for n in range(51)]), "to"),
    (_email(cc=["ok@example.com", "bad address"]), "cc[2]"),
    (EmailRequest(to="ada@example.com", subject="Hi"), "text"),
    (_email(priority=5000), "priority"),
    (_email(template="no_such_template"), "template"),
]


@pytest.mark.parametrize(("request_", "field"), REFUSED)
def test_enqueue_refuses_bad_input_and_writes_nothing(
    db_url: str, request_: EmailRequest, field: str
) -> None:
    with psycopg.connect(db_url) as conn:
        with pytest.raises(mailroom.ValidationError) as refused:
            mailroom.enqueue(conn, request_)
        conn.commit()
    assert refused.value.field == field
    assert _stored(db_url) == []


def test_enqueue_many_refuses_the_whole_call_naming_the_bad_requests_position(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        with pytest.raises(mailroom.BatchValidationError) as refused:
            mailroom.enqueue_many(conn, [_email("a@example.com"), _email("b@example.com"), _email("nope")])
        conn.commit()
    assert (refused.value.index, refused.value.field) == (2, "to")
    assert str(refused.value).startswith("requests[2]: to: ")
    assert isinstance(refused.value, mailroom.ValidationError)
    assert _stored(db_url) == []


def test_limits_come_from_the_environment_the_worker_reads(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAILROOM_MAX_RECIPIENTS", "2")
    with psycopg.connect(db_url) as conn:
        with pytest.raises(mailroom.ValidationError, match="more than 2 recipients"):
            mailroom.enqueue(conn, _email(["a@example.com", "b@example.com"], cc=["c@example.com"]))
        monkeypatch.setenv("MAILROOM_MAX_RECIPIENTS", "many")
        with pytest.raises(mailroom.ConfigError, match="MAILROOM_MAX_RECIPIENTS"):
            mailroom.enqueue_many(conn, [_email()])
        conn.commit()
    assert _stored(db_url) == []


def test_on_an_autocommit_connection_each_call_is_its_own_transaction(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        ids = mailroom.enqueue_many(conn, [_email("a@example.com"), _email("b@example.com")])
        assert [row[0] for row in _stored(db_url)] == ids
        one = mailroom.enqueue(conn, _email("c@example.com"))
    assert [row[0] for row in _stored(db_url)] == [*ids, one]


def test_campaign_email_enqueued_many_at_once_keeps_each_ones_tracked_links(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Campaign email needs a postal address (CAN-SPAM).
    monkeypatch.setenv("MAILROOM_POSTAL_ADDRESS", "Shop Ltd, 1 Market Street, Bristol")
    html = '<p><a href="https://shop.example/sale">Sale</a> <a href="https://shop.example/new">New</a></p>'
    with psycopg.connect(db_url) as conn, conn.transaction():
        ids = mailroom.enqueue_many(
            conn,
            [
                EmailRequest(to="a@example.com", subject="Sale", html=html, campaign_id="spring"),
                _email("b@example.com"),
                EmailRequest(to="c@example.com", subject="Sale", html=html, campaign_id="spring"),
            ],
        )
        links = conn.execute(
            "SELECT email_id, position, url FROM mailroom.tracked_links ORDER BY email_id, position"
        ).fetchall()
    assert links == [
        (ids[0], 0, "https://shop.example/sale"),
        (ids[0], 1, "https://shop.example/new"),
        (ids[2], 0, "https://shop.example/sale"),
        (ids[2], 1, "https://shop.example/new"),
    ]


def test_a_template_is_rendered_when_enqueued_many_at_once(db_url: str) -> None:
    data = {"login": "bob", "code": "01234", "expires_at": "10:15 UTC", "link": "https://app.example/a"}
    with psycopg.connect(db_url) as conn, conn.transaction():
        ids = mailroom.enqueue_many(
            conn,
            [
                EmailRequest(to="a@example.com", template="activation", data=data),
                EmailRequest(to="b@example.com", template="activation", locale="fr", data=data),
            ],
        )
        rows = conn.execute(
            "SELECT subject FROM mailroom.email_queue WHERE id = ANY(%s) ORDER BY id", (ids,)
        ).fetchall()
    assert rows == [("Activate your account, bob",), ("Activez votre compte, bob",)]


async def test_the_async_twins_follow_the_callers_transaction(db_url: str) -> None:
    async def order_then_fail(conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            await mailroom.enqueue_async(conn, _email("gone@example.com"))
            await mailroom.enqueue_many_async(conn, [_email("gone2@example.com")])
            raise OrderFailed

    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        with pytest.raises(mailroom.BatchValidationError) as refused:
            await mailroom.enqueue_many_async(conn, [_email("a@example.com"), _email("a@\nexample.com")])
        assert refused.value.index == 1
        with pytest.raises(OrderFailed):
            await order_then_fail(conn)
        async with conn.transaction():
            one = await mailroom.enqueue_async(conn, _email("a@example.com"))
            many = await mailroom.enqueue_many_async(
                conn,
                [
                    _email("b@example.com"),
                    _email("c@example.com", idempotency_key="k"),
                    _email(idempotency_key="k"),
                ],
            )
    assert many[1] == many[2]
    assert _stored(db_url) == [
        (one, "a@example.com", "pending"),
        (many[0], "b@example.com", "pending"),
        (many[1], "c@example.com", "pending"),
    ]
