"""SMTP replies map to what happens to the email, the address and the sender account."""

from __future__ import annotations

import pytest

from worker.engine.classify import Reply, Verdict, backoff_seconds, classify, clean_reply


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        (Reply(250, "2.0.0 OK queued"), Verdict.SENT),
        (Reply(251, "2.1.5 OK", "data"), Verdict.SENT),
        (Reply(None, "SMTPReadTimeoutError: Timed out waiting for server response"), Verdict.TRANSIENT),
        (Reply(421, "4.3.2 Service shutting down"), Verdict.TRANSIENT),
        (Reply(450, "4.2.0 Mailbox busy", "rcpt"), Verdict.TRANSIENT),
        (Reply(452, "4.3.1 Insufficient system storage"), Verdict.TRANSIENT),
        (Reply(550, "5.1.1 User unknown", "rcpt"), Verdict.BOUNCE),
        (Reply(553, "5.1.3 Bad destination mailbox address syntax", "rcpt"), Verdict.BOUNCE),
        (Reply(550, "Mailbox unavailable", "rcpt"), Verdict.BOUNCE),
        (Reply(550, "5.7.1 Message rejected as spam"), Verdict.PERMANENT),
        (Reply(552, "Message size exceeds fixed limit"), Verdict.PERMANENT),
        (Reply(554, "5.3.4 Message too big for system"), Verdict.PERMANENT),
        (Reply(500, "5.5.2 Syntax error, command unrecognized"), Verdict.LOCAL),
        (Reply(501, "5.5.4 Syntax error in parameters"), Verdict.LOCAL),
        (Reply(503, "5.5.1 Bad sequence of commands"), Verdict.LOCAL),
        (Reply(535, "5.7.8 Authentication credentials invalid", "auth"), Verdict.AUTH),
        (Reply(530, "5.7.0 Authentication required", "mail"), Verdict.AUTH),
        (Reply(554, "Transaction failed"), Verdict.PERMANENT),
        # Our own sender address refused: a configuration problem, never the recipient's bounce.
        (Reply(553, "5.1.8 Sender address rejected: Domain not found", "mail"), Verdict.SENDER),
        (Reply(501, "5.1.7 Bad sender address syntax", "mail"), Verdict.SENDER),
        (Reply(451, "4.3.0 Try again later", "mail"), Verdict.SENDER),
        (Reply(552, "5.3.4 Message size exceeds fixed limit", "mail"), Verdict.PERMANENT),
        (Reply(None, "SMTPServerDisconnected: Connection lost", "mail"), Verdict.SENDER),
        (Reply(550, "5.1.8 Sender domain does not resolve", "rcpt"), Verdict.LOCAL),
        (Reply(550, "Relaying denied", "rcpt"), Verdict.PERMANENT),
        # Before MAIL FROM it is the relay's or the sender's fault, never the email's.
        (Reply(554, "No SMTP service here", "connect"), Verdict.SENDER),
        (Reply(421, "4.3.2 Too many connections", "connect"), Verdict.SENDER),
        (Reply(None, "ConnectionRefusedError: [Errno 111] Connect call failed", "connect"), Verdict.SENDER),
        (Reply(None, "SMTPTimeoutError: Timed out connecting", "connect"), Verdict.SENDER),
        (Reply(502, "5.5.2 EHLO not understood", "connect"), Verdict.SENDER),
        # RFC 4954: only 235 completes AUTH. A 250 (or a 334 that never ends) is a failed login.
        (Reply(250, "2.0.0 OK", "auth"), Verdict.AUTH),
        (Reply(334, "VXNlcm5hbWU6", "auth"), Verdict.AUTH),
        (Reply(454, "4.7.0 Temporary authentication failure", "auth"), Verdict.AUTH),
        (Reply(None, "SMTPServerDisconnected: Connection lost", "auth"), Verdict.SENDER),
        # Only a 2xx to the end of DATA is a send.
        (Reply(250, "2.1.5 OK", "rcpt"), Verdict.TRANSIENT),
        (Reply(220, "ready", "connect"), Verdict.SENDER),
        (
            Reply(None, "SMTPReadTimeoutError: Timed out waiting for server response", "data"),
            Verdict.TRANSIENT,
        ),
        (Reply(534, "5.7.9 Authentication mechanism is too weak", "auth"), Verdict.AUTH),
        (Reply(504, "5.7.4 Unrecognized authentication type", "auth"), Verdict.AUTH),
    ],
)
def test_reply_is_classified_by_code_and_enhanced_code(reply: Reply, verdict: Verdict) -> None:
    assert classify(reply) is verdict


def test_enhanced_code_is_read_from_the_reply_text() -> None:
    assert Reply(550, "5.1.1 <a@b.c>: Recipient address rejected").enhanced == "5.1.1"
    assert Reply(550, "Recipient address rejected").enhanced is None


@pytest.mark.parametrize("unit_random", [0.0, 0.5, 1.0])
def test_backoff_doubles_from_the_base_with_jitter_and_stops_at_the_cap(unit_random: float) -> None:
    delays = [backoff_seconds(n, 60.0, 3600.0, unit_random) for n in range(8)]
    ceilings = [min(3600.0, 60.0 * 2**n) for n in range(8)]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert delays[-1] <= 3600.0


def test_replies_that_cannot_be_stored_are_cleaned() -> None:
    malformed = clean_reply(-1, "garbage", "data")
    assert malformed.code is None
    assert "malformed reply (code -1)" in malformed.text
    assert classify(malformed) is Verdict.TRANSIENT
    undecodable = clean_reply(250, "2.0.0 Ok caf\udce9\x00", "data")
    assert undecodable.text == "2.0.0 Ok caf?"
    assert undecodable.text.encode("utf-8")
