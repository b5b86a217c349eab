"""OAuth2 senders against a local token endpoint and an SMTP server that checks the XOAUTH2 string.

Tokens are fetched once per sender and process, shared by its connections, refreshed before they
expire and once after the server refuses one; a refusal that outlasts the refresh, or an endpoint
that refuses the grant, suspends the sender; an endpoint that cannot be reached opens its circuit.
No email is charged for any of it.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import psycopg
import pytest

from tests.fixtures_db import adopt_role
from tests.fixtures_smtp import SinkFactory
from tests.worker.helpers import enqueue_many, run_until_drained, statuses
from tests.worker.oauth_helpers import (
    CLIENT_ID,
    CLIENT_SECRET,
    MAILBOX,
    REFRESH_TOKEN,
    TokenEndpoint,
    XOAuth2Handler,
    add_oauth_sender,
    token_endpoint,
)
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.message import Envelope
from worker.devtools.sink import RunningSink
from worker.engine.classify import Verdict, classify
from worker.engine.oauth import (
    OAuthClient,
    TokenCache,
)
from worker.engine.smtp import SmtpAccount, SmtpConnection

BODY = b"From: mailer@example.org\r\nTo: b@example.com\r\nSubject: x\r\n\r\nhello\r\n"


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _account(port: int, endpoint: TokenEndpoint) -> SmtpAccount:
    client = OAuthClient(endpoint.url, CLIENT_ID, CLIENT_SECRET, REFRESH_TOKEN)
    return SmtpAccount(
        7, "127.0.0.1", port, "none", MAILBOX, None,
        connect_timeout=5, command_timeout=5, data_timeout=5, oauth=client,
    )  # fmt: skip


async def _send_once(account: SmtpAccount, tokens: TokenCache) -> Verdict:
    """One message on a new connection, closed after."""
    connection = SmtpConnection(account, tokens)
    try:
        attempt = await connection.send(Envelope(MAILBOX, "b@example.com", "<id@example.org>", BODY))
    finally:
        await connection.close()
    return classify(attempt.reply)


def _sender(db_url: str) -> dict[str, Any]:
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        row = conn.execute("SELECT * FROM mailroom.sender_accounts").fetchone()
    assert row is not None
    return row


def _charged(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT coalesce(max(retry_count), 0) FROM mailroom.email_queue").fetchone()
    assert row is not None
    return int(row[0])


def _fast(settings: Settings) -> Settings:
    return replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05, lease_seconds=2.0)


@dataclass(frozen=True)
class Rig:
    """An SMTP server that checks the XOAUTH2 string, and the token endpoint whose tokens it takes."""

    smtp: XOAuth2Handler
    sink: RunningSink
    endpoint: TokenEndpoint


@pytest.fixture
async def rig(smtp_sink_factory: SinkFactory) -> AsyncIterator[Rig]:
    smtp = XOAuth2Handler()
    sink = smtp_sink_factory(handler=smtp)
    async with token_endpoint(smtp) as endpoint:
        yield Rig(smtp, sink, endpoint)


# --- the worker ----------------------------------------------------------------------------------


async def test_a_fresh_oauth2_sender_delivers_after_fetching_a_token(
    db_url: str, settings: Settings, rig: Rig
) -> None:
    smtp, sink, endpoint = rig.smtp, rig.sink, rig.endpoint
    add_oauth_sender(db_url, settings.secret_key or "", sink.port, endpoint.url)
    enqueue_many(db_url, 3)
    assert await run_until_drained(db_url, _fast(settings)) == 3
    assert statuses(db_url) == {"sent": 3}
    assert endpoint.requests == [
        {
            "grant_type": "refresh_token",
            "refresh_token": REFRESH_TOKEN,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
        }
    ]
    assert {m.login for m in sink.handler.messages} == {MAILBOX}
    assert smtp.presented == endpoint.issued  # the one token, once per connection


async def test_two_connections_share_one_token(rig: Rig) -> None:
    smtp, sink, endpoint = rig.smtp, rig.sink, rig.endpoint
    account, tokens = _account(sink.port, endpoint), TokenCache()
    first, second = SmtpConnection(account, tokens), SmtpConnection(account, tokens)
    envelope = Envelope(MAILBOX, "b@example.com", "<id@example.org>", BODY)
    try:
        replies = [(await c.send(envelope)).reply for c in (first, second)]
    finally:
        await first.close()
        await second.close()
    assert [classify(r) for r in replies] == [Verdict.SENT, Verdict.SENT]
    assert len(endpoint.requests) == 1
    assert len({m.peer for m in sink.handler.messages}) == 2  # two connections, one token
    assert smtp.presented == endpoint.issued * 2


async def test_a_token_is_refreshed_a_margin_before_it_expires(rig: Rig) -> None:
    smtp, sink, endpoint = rig.smtp, rig.sink, rig.endpoint
    clock = Clock()
    endpoint.expires_in = 600
    account, tokens = _account(sink.port, endpoint), TokenCache(clock=clock, margin=60)
    assert await _send_once(account, tokens) is Verdict.SENT
    clock.now += 600 - 60 - 1  # a second before the margin: the cached token still serves
    assert await _send_once(account, tokens) is Verdict.SENT
    assert len(endpoint.requests) == 1
    clock.now += 2
    assert await _send_once(account, tokens) is Verdict.SENT
    assert len(endpoint.requests) == 2
    assert smtp.presented == [endpoint.issued[0], endpoint.issued[0], endpoint.issued[1]]


async def test_a_revoked_token_is_refreshed_once_and_the_email_goes_out(
    rig: Rig,
) -> None:
    smtp, sink, endpoint = rig.smtp, rig.sink, rig.endpoint
    account, tokens = _account(sink.port, endpoint), TokenCache()
    assert await _send_once(account, tokens) is Verdict.SENT
    smtp.valid.clear()  # revoked at the provider, still cached here
    assert await _send_once(account, tokens) is Verdict.SENT
    first, second = endpoint.issued
    assert smtp.presented == [first, first, second]
    assert smtp.empty_replies == 1  # the error challenge was answered with an empty line
    assert len(sink.handler.messages) == 2


async def test_a_revoked_token_in_the_worker_is_refreshed_and_the_sender_stays_active(
    db_url: str, settings: Settings, rig: Rig
) -> None:
    smtp, sink, endpoint = rig.smtp, rig.sink, rig.endpoint
    endpoint.refused = 1  # the first token is refused by the server, the second accepted
    add_oauth_sender(db_url, settings.secret_key or "", sink.port, endpoint.url)
    enqueue_many(db_url, 2)
    assert await run_until_drained(db_url, _fast(settings)) == 2
    assert len(endpoint.requests) == 2
    assert smtp.presented == endpoint.issued
    assert _sender(db_url)["status"] == "active"
    assert statuses(db_url) == {"sent": 2} and _charged(db_url) == 0


async def test_a_token_refused_after_a_refresh_suspends_the_sender_and_charges_nothing(
    db_url: str, settings: Settings, rig: Rig
) -> None:
    smtp, sink, endpoint = rig.smtp, rig.sink, rig.endpoint
    endpoint.refused = 100  # the server accepts none of the endpoint's tokens
    add_oauth_sender(db_url, settings.secret_key or "", sink.port, endpoint.url)
    enqueue_many(db_url, 2)
    assert await run_until_drained(db_url, _fast(settings)) == 0
    assert len(endpoint.requests) == 2  # the first token, and one refresh after its refusal
    assert smtp.presented == endpoint.issued
    assert smtp.empty_replies == 2
    sender = _sender(db_url)
    assert sender["status"] == "suspended"
    assert "Username and Password not accepted" in sender["status_reason"]
    assert statuses(db_url) == {"pending": 2} and _charged(db_url) == 0
    assert sink.handler.received_count == 0


async def test_an_endpoint_refusing_the_grant_suspends_the_sender_with_its_reason(
    db_url: str, settings: Settings, rig: Rig
) -> None:
    smtp, sink, endpoint = rig.smtp, rig.sink, rig.endpoint
    refusal = {"error": "invalid_grant", "error_description": "Token has been expired or revoked."}
    endpoint.answers.append((400, refusal))
    add_oauth_sender(db_url, settings.secret_key or "", sink.port, endpoint.url)
    enqueue_many(db_url, 2)
    assert await run_until_drained(db_url, _fast(settings)) == 0
    sender = _sender(db_url)
    assert sender["status"] == "suspended"
    assert "invalid_grant: Token has been expired or revoked." in sender["status_reason"]
    assert statuses(db_url) == {"pending": 2} and _charged(db_url) == 0
    assert smtp.presented == []  # no SMTP login was tried without a token


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "answer",
    [None, (500, {"error": "internal"}), (200, b"<html>maintenance</html>"), (200, {"token_type": "Bearer"})],
    ids=["unreachable", "server-error", "not-json", "no-token"],
)
async def test_an_endpoint_that_fails_opens_the_circuit_and_charges_nothing(
    db_url: str, settings: Settings, rig: Rig, answer: tuple[int, Any] | None
) -> None:
    smtp, sink, endpoint = rig.smtp, rig.sink, rig.endpoint
    url = f"http://127.0.0.1:{_closed_port()}/token" if answer is None else endpoint.url
    if answer is not None:
        endpoint.answers.append(answer)
    add_oauth_sender(db_url, settings.secret_key or "", sink.port, url)
    enqueue_many(db_url, 2)
    assert await run_until_drained(db_url, _fast(settings)) == 0
    sender = _sender(db_url)
    assert (sender["status"], sender["circuit_state"]) == ("active", "open")
    assert "token endpoint" in sender["circuit_reason"]
    assert statuses(db_url) == {"pending": 2} and _charged(db_url) == 0
    assert smtp.presented == []


async def test_a_rotated_refresh_token_is_stored_encrypted_and_used_next(
    db_url: str, settings: Settings, rig: Rig
) -> None:
    sink, endpoint = rig.sink, rig.endpoint
    box = SecretBox(settings.secret_key or "")
    endpoint.rotate_to = "refresh-token-rotated-9"
    add_oauth_sender(db_url, settings.secret_key or "", sink.port, endpoint.url)
    enqueue_many(db_url, 1)
    assert await run_until_drained(db_url, _fast(settings)) == 1
    stored = bytes(_sender(db_url)["oauth_refresh_token_encrypted"])
    assert b"rotated" not in stored and box.decrypt(stored) == "refresh-token-rotated-9"
    enqueue_many(db_url, 1, start=1)
    assert await run_until_drained(db_url, _fast(settings)) == 1  # a new process: a new token
    assert [r["refresh_token"] for r in endpoint.requests] == [REFRESH_TOKEN, "refresh-token-rotated-9"]


async def test_a_rotation_never_overwrites_a_refresh_token_an_operator_stored_meanwhile(
    db_url: str, settings: Settings
) -> None:
    from psycopg_pool import AsyncConnectionPool

    from worker.engine.database import Pool
    from worker.engine.sender_book import SenderBook

    box = SecretBox(settings.secret_key or "")
    sender_id = add_oauth_sender(db_url, settings.secret_key or "", 25, "http://127.0.0.1:9/token")
    before = bytes(_sender(db_url)["oauth_refresh_token_encrypted"])
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "UPDATE mailroom.sender_accounts SET oauth_refresh_token_encrypted = %s",
            (box.encrypt("typed-by-an-operator"),),
        )
    pool: Pool = AsyncConnectionPool(db_url, min_size=1, max_size=1, open=False)
    await pool.open()
    try:
        book = SenderBook(pool, settings)
        assert await book._store_refresh_token(sender_id, before, "rotated") is None
    finally:
        await pool.close()
    assert box.decrypt(bytes(_sender(db_url)["oauth_refresh_token_encrypted"])) == "typed-by-an-operator"


# --- secrets at rest -----------------------------------------------------------------------------


@pytest.mark.usefixtures("role_lock")
def test_oauth_secrets_are_encrypted_at_rest_and_hidden_from_read_only_roles(
    db_url: str, settings: Settings
) -> None:
    add_oauth_sender(db_url, settings.secret_key or "", 25, "https://oauth2.googleapis.com/token")
    row = _sender(db_url)
    for column, secret in (
        ("oauth_client_secret_encrypted", CLIENT_SECRET),
        ("oauth_refresh_token_encrypted", REFRESH_TOKEN),
    ):
        assert secret.encode() not in bytes(row[column])
        assert SecretBox(settings.secret_key or "").decrypt(row[column]) == secret
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE oauth_reader NOLOGIN")
        adopt_role(conn, "oauth_reader")  # SET ROLE needs membership, which a non-superuser owner lacks
        conn.execute("SELECT mailroom.grant_read_only_role('oauth_reader')")
        conn.execute("SET ROLE oauth_reader")
        assert conn.execute("SELECT auth_type, oauth_client_id FROM mailroom.sender_accounts").fetchone() == (
            "oauth2",
            CLIENT_ID,
        )
        for column in ("oauth_client_secret_encrypted", "oauth_refresh_token_encrypted"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SELECT {column} FROM mailroom.sender_accounts")  # noqa: S608
        conn.execute("RESET ROLE")
        conn.execute("DROP OWNED BY oauth_reader")
        conn.execute("DROP ROLE oauth_reader")


def test_the_database_refuses_an_incomplete_oauth2_sender(db_url: str) -> None:
    with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_username,"
            " auth_type, oauth_token_url, oauth_client_id) VALUES ('x', 'a@example.org', 'h', 25, 'a@example.org',"
            " 'oauth2', 'https://e.example/token', 'id')"
        )


# --- what the endpoint answers ---------------------------------------------------------------------
