"""Every phase of an SMTP session answered wrongly, against a real socket: the verdict says whose fault it is.

Only a 2xx to the end of DATA is a send. Before MAIL FROM the fault is the relay's (circuit) or the
login's (suspend); a refused MAIL FROM is the sender's; RCPT and DATA are the email's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import psycopg
import pytest

from tests.scripted_smtp import ScriptedServer
from tests.worker.helpers import add_sender, enqueue_many, statuses
from worker.core.config import Settings
from worker.core.message import Envelope
from worker.engine.classify import Verdict, classify
from worker.engine.delivery import Worker, WorkerOptions
from worker.engine.smtp import SmtpAccount, SmtpConnection

BODY = b"From: a@example.org\r\nTo: b@example.com\r\nSubject: x\r\n\r\nhello\r\n"


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[dict[str, str]], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def make(script: dict[str, str]) -> ScriptedServer:
        server = ScriptedServer(script)
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


# A busy host can take a while to answer even on loopback: only the timeout a stalled phase waits on
# is short, every other one is far longer than any answer takes.
ANSWERED = 30.0
STALLED = 2.0
# Which of the account's timeouts bounds each phase: connect covers the greeting, EHLO, STARTTLS
# (its handshake) and AUTH; command covers MAIL and RCPT; data covers the body's end.
BOUND_BY = {"greeting": "connect", "ehlo": "connect", "starttls": "connect", "auth": "connect",
            "mail": "command", "rcpt": "command", "data": "command", "body": "data"}  # fmt: skip


def _timeouts(script: dict[str, str], security: str) -> dict[str, float]:
    """The account's three timeouts for `script`: short only where the server never answers."""
    stalled = {BOUND_BY[phase] for phase, action in script.items() if action == "stall"}
    if security == "starttls" and script.get("starttls", "").startswith("220"):
        stalled.add("connect")  # plain text where the TLS handshake should be: the handshake waits
    return {
        f"{bound}_timeout": STALLED if bound in stalled else ANSWERED
        for bound in ("connect", "command", "data")
    }


async def _send(
    server: ScriptedServer, *, login: bool = False, security: str = "none"
) -> tuple[Verdict, str, ScriptedServer]:
    await server.start()
    account = SmtpAccount(
        1, "127.0.0.1", server.port, security, "user" if login else None, "secret" if login else None,
        **_timeouts(server.script, security),
    )  # fmt: skip
    connection = SmtpConnection(account)
    try:
        attempt = await connection.send(
            Envelope("noreply@example.org", "b@example.com", "<id@example.org>", BODY)
        )
    finally:
        await connection.close()
    return classify(attempt.reply), attempt.reply.phase, server


CASES = [
    # (script, login, security, verdict, phase)
    ({"greeting": "421 4.3.2 Too busy"}, False, "none", Verdict.SENDER, "connect"),
    ({"greeting": "554 5.7.1 No SMTP service here"}, False, "none", Verdict.SENDER, "connect"),
    ({"greeting": "stall"}, False, "none", Verdict.SENDER, "connect"),
    ({"greeting": "drop"}, False, "none", Verdict.SENDER, "connect"),
    ({"ehlo": "554 5.5.1 Go away"}, False, "none", Verdict.SENDER, "connect"),
    ({"ehlo": "drop"}, False, "none", Verdict.SENDER, "connect"),
    ({}, False, "starttls", Verdict.SENDER, "connect"),  # STARTTLS required, not offered
    (
        {"ehlo": "250-scripted\r\n250 STARTTLS", "starttls": "454 4.7.0 TLS not available"},
        False,
        "starttls",
        Verdict.SENDER,
        "connect",
    ),
    (
        {"ehlo": "250-scripted\r\n250 STARTTLS", "starttls": "220 2.0.0 Ready"},
        False,
        "starttls",
        Verdict.SENDER,
        "connect",
    ),  # then plain text where a TLS handshake should be: broken TLS
    ({"auth": "250 2.0.0 OK"}, True, "none", Verdict.AUTH, "auth"),  # RFC 4954: only 235 completes AUTH
    ({"auth": "334 VXNlcm5hbWU6"}, True, "none", Verdict.AUTH, "auth"),
    ({"auth": "535 5.7.8 Authentication credentials invalid"}, True, "none", Verdict.AUTH, "auth"),
    ({"auth": "454 4.7.0 Temporary authentication failure"}, True, "none", Verdict.AUTH, "auth"),
    ({"auth": "drop"}, True, "none", Verdict.SENDER, "auth"),
    ({"mail": "451 4.3.0 Try later"}, False, "none", Verdict.SENDER, "mail"),
    ({"mail": "550 5.7.1 Sender rejected"}, False, "none", Verdict.SENDER, "mail"),
    ({"mail": "drop"}, False, "none", Verdict.SENDER, "mail"),
    ({"rcpt": "450 4.2.0 Mailbox busy"}, False, "none", Verdict.TRANSIENT, "rcpt"),
    ({"rcpt": "550 5.1.1 User unknown"}, False, "none", Verdict.BOUNCE, "rcpt"),
    ({"rcpt": "drop"}, False, "none", Verdict.TRANSIENT, "rcpt"),
    ({"rcpt": "stall"}, False, "none", Verdict.TRANSIENT, "rcpt"),
    ({"data": "250 2.0.0 Ok"}, False, "none", Verdict.TRANSIENT, "data"),  # DATA without 354: not a send
    ({"data": "554 5.5.1 No valid recipients"}, False, "none", Verdict.PERMANENT, "data"),
    ({"data": "drop"}, False, "none", Verdict.TRANSIENT, "data"),
    ({"body": "451 4.3.0 Queue full"}, False, "none", Verdict.TRANSIENT, "data"),
    ({"body": "554 5.7.1 Spam"}, False, "none", Verdict.PERMANENT, "data"),
    ({"body": "drop"}, False, "none", Verdict.TRANSIENT, "data"),
    ({"body": "stall"}, False, "none", Verdict.TRANSIENT, "data"),
    ({}, False, "none", Verdict.SENT, "data"),
]


@pytest.mark.parametrize(("script", "login", "security", "verdict", "phase"), CASES)
async def test_each_phase_answered_wrongly_has_its_owner(
    scripted: Callable[[dict[str, str]], ScriptedServer],
    script: dict[str, str],
    login: bool,
    security: str,
    verdict: Verdict,
    phase: str,
) -> None:
    got, got_phase, server = await _send(scripted(script), login=login, security=security)
    assert (got, got_phase) == (verdict, phase)
    if verdict is not Verdict.SENT:
        assert server.bodies == 0 or phase == "data"  # nothing sent before the phase that failed


async def test_a_relay_answering_auth_with_250_never_gets_email_recorded_sent(
    db_url: str, settings: Settings, scripted: Callable[[dict[str, str]], ScriptedServer]
) -> None:
    server = await scripted({"auth": "250 2.0.0 OK"}).start()
    add_sender(db_url, server.port, username="user", password="secret", settings=settings)
    enqueue_many(db_url, 3)
    # Nothing stalls here: timeouts far longer than any answer takes, so a busy host never trips one.
    fast = replace(settings, smtp_connect_timeout=30, smtp_command_timeout=30, smtp_data_timeout=30)
    worker = Worker(db_url, fast, WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2))
    await worker.run()
    assert worker.sent == 0 and server.bodies == 0
    assert not any(c.startswith("DATA") for c in server.received)
    assert statuses(db_url) == {"pending": 3}
    with psycopg.connect(db_url) as conn:
        sender = conn.execute("SELECT status, status_reason FROM mailroom.sender_accounts").fetchone()
        charged = conn.execute("SELECT max(retry_count) FROM mailroom.email_queue").fetchone()
    assert sender is not None and sender[0] == "suspended" and "250" in sender[1]
    assert charged == (0,)  # the login's fault: no email's retry budget was used
