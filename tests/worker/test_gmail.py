"""Gmail API senders against a local token endpoint and a local Gmail API in the test process.

The endpoint verifies the JWT bearer grant with the service account's public key (signature, `aud`,
`sub`, scope); the API checks the access token and keeps the raw bytes, which are compared with what
the SMTP path sends. Each fault class goes through a real worker run: the email's (400), the
account's (401/403, token refusals: suspended with Google's words), a pause (429, rate-limit 403s)
and an outage (5xx, timeouts, refused connections): circuit open, email uncharged.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from email import message_from_bytes
from typing import Any

import dkim as dkimpy
import jwt
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.fixtures_db import adopt_role
from tests.fixtures_smtp import SinkFactory
from tests.worker.gmail_helpers import (
    KEY_ID,
    SERVICE_ACCOUNT,
    SUBJECT,
    LocalGoogle,
    add_gmail_sender,
    google_error,
    local_google,
    service_account_key,
)
from tests.worker.helpers import enqueue_many, run_until_drained, statuses
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.dkim import dns_record, normalise_private_key
from worker.core.gmail_key import GMAIL_SEND_SCOPE, parse_service_account_key
from worker.core.outbox import EmailRequest, enqueue
from worker.core.validation import ValidationError
from worker.engine.classify import Verdict
from worker.engine.gmail import MANY_RECIPIENTS, gmail_verdict
from worker.ops.senders import SenderSpec, add_sender, set_sender_status

Row = dict[str, Any]


@pytest.fixture
async def google(pem: bytes) -> AsyncIterator[LocalGoogle]:
    async with local_google(pem) as running:
        yield running


def _fast(settings: Settings, google: LocalGoogle) -> Settings:
    return replace(
        settings,
        gmail_api_url=google.url,
        retry_base_seconds=0.01,
        retry_cap_seconds=0.05,
        lease_seconds=2.0,
        circuit_base_seconds=600.0,  # an opened circuit stays open for the rest of the test
    )


def _add(db_url: str, settings: Settings, google: LocalGoogle, pem: bytes, **options: Any) -> int:
    return add_gmail_sender(
        db_url, settings.secret_key or "", service_account_key(pem, google.token_uri), **options
    )


def _one(db_url: str, sql: str, *params: object) -> Row:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row


def _rows(db_url: str, sql: str, *params: object) -> list[Row]:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def _sender(db_url: str, name: str = "workspace") -> Row:
    return _one(db_url, "SELECT * FROM mailroom.sender_accounts WHERE name = %s", name)


def _sent_today(db_url: str) -> int:
    row = _one(db_url, "SELECT coalesce(sum(sent), 0) AS n FROM mailroom.sender_usage")
    return int(row["n"])


def _verifies(message: bytes, pem: bytes) -> bool:
    record = dns_record(normalise_private_key(pem)).encode("ascii")

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name == b"mail2026._domainkey.example.org." else None

    return bool(dkimpy.verify(message, dnsfunc=lookup))


# --- delivery ------------------------------------------------------------------------------------


async def test_a_gmail_sender_sends_the_smtp_bytes_as_the_impersonated_user_with_one_cached_token(
    db_url: str, settings: Settings, pem: bytes, google: LocalGoogle, smtp_sink_factory: SinkFactory
) -> None:
    fast = _fast(settings, google)
    _add(db_url, fast, google, pem, dkim_key=pem)
    ids = enqueue_many(db_url, 3)
    assert await run_until_drained(db_url, fast) == 3
    assert statuses(db_url) == {"sent": 3}

    # One grant for the three sends: RS256 with the key's id, as the impersonated user, gmail.send only.
    (claims,) = google.claims
    assert (claims["iss"], claims["sub"], claims["aud"]) == (SERVICE_ACCOUNT, SUBJECT, google.token_uri)
    assert claims["scope"] == GMAIL_SEND_SCOPE
    assert claims["exp"] - claims["iat"] == 3600
    assert google.headers[0]["alg"] == "RS256" and google.headers[0]["kid"] == KEY_ID
    assert google.presented == google.issued * 3

    # The message: the email's own headers and body, signed with the sender's DKIM key.
    first = google.raw[0]
    stored = _one(db_url, "SELECT message_id FROM mailroom.email_queue WHERE id = %s", ids[0])
    parsed = message_from_bytes(first)
    assert parsed["From"].endswith("<noreply@example.org>") or parsed["From"] == "noreply@example.org"
    assert (parsed["To"], parsed["Subject"], parsed["Message-ID"]) == (
        "u0@example.com",
        "Hello 0",
        stored["message_id"],
    )
    assert b"Body 0" in first
    assert _verifies(first, pem)

    # Gmail's id for each message is in the send log, where a relay's queue id is.
    logs = _rows(db_url, "SELECT email_id, outcome, response FROM mailroom.send_logs ORDER BY email_id")
    assert [(r["email_id"], r["outcome"]) for r in logs] == [(i, "sent") for i in ids]
    assert [r["response"] for r in logs] == [
        f"Gmail API accepted it: message id 18c{n:013x}" for n in (1, 2, 3)
    ]
    assert _sent_today(db_url) == 3  # charged like any send

    # The same email through an SMTP sender with the same key: the same headers, body and signature.
    sink = smtp_sink_factory()
    with psycopg.connect(db_url) as conn:
        set_sender_status(conn, "workspace", "paused")
        spec = SenderSpec(
            "relay", SUBJECT, "127.0.0.1", sink.port, smtp_security="none",
            dkim_domain="example.org", dkim_selector="mail2026",
        )  # fmt: skip
        add_sender(conn, spec, None, SecretBox(settings.secret_key or ""), pem)
    enqueue_many(db_url, 1)
    assert await run_until_drained(db_url, fast) == 1
    (received,) = sink.handler.messages
    over_smtp = message_from_bytes(received.content)
    assert _verifies(received.content, pem)
    assert [k for k in parsed.keys()] == [k for k in over_smtp.keys()]  # noqa: SIM118
    for header in ("From", "To", "Subject", "Content-Type", "MIME-Version"):
        assert parsed[header] == over_smtp[header]
    assert first.split(b"\r\n\r\n", 1)[1] == received.content.split(b"\r\n\r\n", 1)[1]


async def test_an_email_with_several_recipients_fails_rather_than_share_one_copy(
    db_url: str, settings: Settings, pem: bytes, google: LocalGoogle
) -> None:
    fast = _fast(settings, google)
    _add(db_url, fast, google, pem)
    with psycopg.connect(db_url) as conn:
        enqueue(
            conn, EmailRequest(to="a@example.com", cc=["b@example.com"], subject="s", text="t"), settings=fast
        )
    assert await run_until_drained(db_url, fast) == 0
    row = _one(db_url, "SELECT status, last_error FROM mailroom.email_queue")
    assert row["status"] == "failed" and MANY_RECIPIENTS in row["last_error"]
    assert google.sends == 0


# --- whose fault ---------------------------------------------------------------------------------


async def test_a_message_gmail_refuses_fails_that_email_alone(
    db_url: str, settings: Settings, pem: bytes, google: LocalGoogle
) -> None:
    fast = _fast(settings, google)
    _add(db_url, fast, google, pem)
    first, second = enqueue_many(db_url, 2)
    google.send_answers.append(
        (400, google_error(400, "Invalid To header", "INVALID_ARGUMENT", "invalidArgument"))
    )
    assert await run_until_drained(db_url, fast) == 1
    failed = _one(db_url, "SELECT status, last_error FROM mailroom.email_queue WHERE id = %s", first)
    assert failed["status"] == "failed" and "Invalid To header" in failed["last_error"]
    assert _one(db_url, "SELECT status FROM mailroom.email_queue WHERE id = %s", second)["status"] == "sent"
    log = _one(db_url, "SELECT outcome FROM mailroom.send_logs WHERE email_id = %s", first)
    assert log["outcome"] == "permanent"
    assert (_sender(db_url)["status"], _sender(db_url)["circuit_state"]) == ("active", "closed")


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        # No domain-wide delegation for this client and scope: the token endpoint refuses.
        ("token", "unauthorized_client"),
        # The API refuses the user (delegation denied, the API turned off): a 403 that is not a rate limit.
        ("forbidden", "Delegation denied"),
        # A revoked key: the API refuses the token, and the fresh one too.
        ("revoked", "Request had invalid authentication credentials"),
    ],
)
async def test_a_refused_key_or_delegation_suspends_the_sender_with_googles_words_and_charges_nothing(
    db_url: str, settings: Settings, pem: bytes, google: LocalGoogle, answer: str, words: str
) -> None:
    fast = _fast(settings, google)
    _add(db_url, fast, google, pem)
    enqueue_many(db_url, 2)
    if answer == "token":
        google.subject = "someone-else@example.org"
    elif answer == "forbidden":
        denied = google_error(403, f"Delegation denied for {SUBJECT}", "PERMISSION_DENIED", "forbidden")
        google.send_answers.append((403, denied))
    else:
        unauthenticated = google_error(
            401, "Request had invalid authentication credentials.", "UNAUTHENTICATED"
        )
        google.send_answers += [(401, unauthenticated), (401, unauthenticated)]
    assert await run_until_drained(db_url, fast) == 0
    sender = _sender(db_url)
    assert sender["status"] == "suspended"
    assert words in sender["status_reason"]
    assert SUBJECT not in sender["status_reason"]  # addresses masked, as in every reason
    assert statuses(db_url) == {"pending": 2}
    assert _one(db_url, "SELECT max(retry_count) AS n FROM mailroom.email_queue")["n"] == 0
    assert _sent_today(db_url) == 0
    if answer == "revoked":
        assert len(google.claims) == 2  # one fresh token before the refusal stands


async def test_one_refused_token_is_replaced_and_the_email_goes_out(
    db_url: str, settings: Settings, pem: bytes, google: LocalGoogle
) -> None:
    fast = _fast(settings, google)
    _add(db_url, fast, google, pem)
    enqueue_many(db_url, 1)
    google.send_answers.append((401, google_error(401, "expired", "UNAUTHENTICATED")))
    assert await run_until_drained(db_url, fast) == 1
    assert len(google.issued) == 2 and google.presented == google.issued
    assert _sender(db_url)["status"] == "active"


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (429, None),
        (403, "rateLimitExceeded"),
        (403, "userRateLimitExceeded"),
        (403, "dailyLimitExceeded"),
        (500, None),
        (503, None),
    ],
)
async def test_rate_limits_and_outages_open_the_circuit_and_return_the_email_uncharged(
    db_url: str, settings: Settings, pem: bytes, google: LocalGoogle, status: int, reason: str | None
) -> None:
    fast = _fast(settings, google)
    _add(db_url, fast, google, pem)
    enqueue_many(db_url, 3)
    state = "RESOURCE_EXHAUSTED" if status == 429 else "UNAVAILABLE" if status >= 500 else "PERMISSION_DENIED"
    google.send_answers.append((status, google_error(status, "slow down or come back later", state, reason)))
    assert await run_until_drained(db_url, fast) == 0
    sender = _sender(db_url)
    assert (sender["status"], sender["circuit_state"]) == ("active", "open")
    assert f"Gmail API {status}" in sender["circuit_reason"]
    if reason is not None:
        assert reason in sender["circuit_reason"]
    assert google.sends == 1  # the batch stopped at the first answer
    assert statuses(db_url) == {"pending": 3}
    assert _one(db_url, "SELECT max(retry_count) AS n FROM mailroom.email_queue")["n"] == 0
    assert _sent_today(db_url) == 0  # the quota reserved for the batch came back
    log = _one(db_url, "SELECT outcome FROM mailroom.send_logs")
    assert log["outcome"] == "sender_unreachable"


async def test_an_api_that_does_not_answer_in_time_is_the_senders_fault(
    db_url: str, settings: Settings, pem: bytes, google: LocalGoogle
) -> None:
    fast = _fast(settings, google)
    _add(db_url, fast, google, pem)
    enqueue_many(db_url, 1)
    google.hold = asyncio.Event()  # never set while the worker waits: its timeout ends the attempt
    try:
        # The account's timeouts (here the worker's SMTP ones) bound an API call too.
        assert await run_until_drained(db_url, fast, smtp_timeout=0.5) == 0
    finally:
        google.hold.set()
    sender = _sender(db_url)
    assert sender["circuit_state"] == "open" and "Gmail API unreachable" in sender["circuit_reason"]
    assert statuses(db_url) == {"pending": 1}


async def test_an_api_that_refuses_connections_opens_the_circuit(
    db_url: str, settings: Settings, pem: bytes, google: LocalGoogle
) -> None:
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    fast = replace(_fast(settings, google), gmail_api_url=f"http://127.0.0.1:{port}")
    _add(db_url, fast, google, pem)
    enqueue_many(db_url, 1)
    assert await run_until_drained(db_url, fast) == 0
    sender = _sender(db_url)
    assert sender["circuit_state"] == "open" and "Gmail API unreachable" in sender["circuit_reason"]
    assert statuses(db_url) == {"pending": 1}


def test_each_api_answer_has_its_fault_class() -> None:
    assert gmail_verdict(200, frozenset()) is Verdict.SENT
    assert gmail_verdict(400, frozenset({"invalidArgument"})) is Verdict.PERMANENT
    assert gmail_verdict(413, frozenset()) is Verdict.PERMANENT
    assert gmail_verdict(401, frozenset()) is Verdict.AUTH
    assert gmail_verdict(403, frozenset({"forbidden"})) is Verdict.AUTH
    assert gmail_verdict(403, frozenset({"insufficientPermissions"})) is Verdict.AUTH
    for reason in ("rateLimitExceeded", "userRateLimitExceeded", "dailyLimitExceeded"):
        assert gmail_verdict(403, frozenset({reason})) is Verdict.SENDER
    assert gmail_verdict(429, frozenset()) is Verdict.SENDER
    assert gmail_verdict(500, frozenset()) is Verdict.SENDER
    assert gmail_verdict(404, frozenset()) is Verdict.SENDER


# --- the key -------------------------------------------------------------------------------------


def test_the_key_is_encrypted_at_rest_and_hidden_from_read_only_roles(
    db_url: str, settings: Settings, pem: bytes
) -> None:
    key_text = service_account_key(pem, "https://oauth2.googleapis.com/token")
    add_gmail_sender(db_url, settings.secret_key or "", key_text)
    row = _sender(db_url)
    assert b"PRIVATE KEY" not in bytes(row["gmail_key_encrypted"])
    assert SecretBox(settings.secret_key or "").decrypt(row["gmail_key_encrypted"]) == key_text
    role = f"gmail_reader_{secrets.token_hex(4)}"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} NOLOGIN")
        adopt_role(conn, role)  # SET ROLE needs membership, which a non-superuser owner lacks
        try:
            conn.execute("SELECT mailroom.grant_read_only_role(%s)", (role,))
            conn.execute(f"SET ROLE {role}")
            seen = conn.execute(
                "SELECT auth_type, gmail_subject_email FROM mailroom.sender_accounts"
            ).fetchone()
            assert seen == ("gmail", SUBJECT)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT gmail_key_encrypted FROM mailroom.sender_accounts")
        finally:
            conn.execute("RESET ROLE")
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_the_database_refuses_a_gmail_sender_without_its_key_or_with_a_password(db_url: str) -> None:
    insert = (
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, auth_type,"
        " gmail_subject_email, gmail_key_encrypted, smtp_password_encrypted) VALUES"
        " ('x', 'a@example.org', 'h', 443, %s, %s, %s, %s)"
    )
    for values in (
        ("gmail", "a@example.org", None, None),  # no key
        ("gmail", None, b"k", None),  # no user
        ("gmail", "a@example.org", b"k", b"p"),  # a password beside the key
        ("password", "a@example.org", b"k", None),  # Gmail settings on another kind of account
    ):
        with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(insert, values)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"type": "authorized_user"}, "not a service account key"),
        ({"token_uri": "http://tokens.example.net/token"}, "token_uri must be an https:// URL"),
        (
            {"private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"},
            "not an unencrypted PEM",
        ),
        ({"client_email": ""}, "has no client_email"),
    ],
)
def test_a_key_that_could_not_work_is_refused_when_added(
    db_url: str, settings: Settings, pem: bytes, change: dict[str, str], words: str
) -> None:
    fields = {"token_uri": "https://oauth2.googleapis.com/token", **change}
    key_text = service_account_key(pem, fields.pop("token_uri"), **fields)
    with pytest.raises(ValidationError, match=words):
        parse_service_account_key(key_text)
    with pytest.raises(ValidationError, match=words):
        add_gmail_sender(db_url, settings.secret_key or "", key_text)
    assert _rows(db_url, "SELECT id FROM mailroom.sender_accounts") == []


def test_the_assertion_is_a_jwt_the_public_key_verifies_and_nothing_else_does(pem: bytes) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.worker.gmail_helpers import new_pem
    from worker.engine.gmail_tokens import GmailAccount, assertion

    key = parse_service_account_key(service_account_key(pem, "https://oauth2.googleapis.com/token"))
    token = assertion(GmailAccount(key, SUBJECT, "https://gmail.googleapis.com"), 1_700_000_000)
    private = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    public = private.public_key()
    claims = jwt.decode(
        token, public, algorithms=["RS256"], audience=key.token_uri, options={"verify_exp": False}
    )
    assert claims["sub"] == SUBJECT and claims["scope"] == GMAIL_SEND_SCOPE
    other_key = serialization.load_pem_private_key(new_pem(), password=None)
    assert isinstance(other_key, rsa.RSAPrivateKey)
    other = other_key.public_key()
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, other, algorithms=["RS256"], audience=key.token_uri, options={"verify_exp": False})
    assert "PRIVATE" not in repr(key)
