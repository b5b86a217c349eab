"""Bounce intake against the real database: DSNs, complaints and junk change exactly what they should."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.producers.bounces.corpus import FIXTURE_KEY, load, readdress, sent_email
from tests.worker.helpers import add_sender
from worker.core.crypto import generate_key
from worker.core.return_path import derive_key
from worker.producers.bounces import COMPLAINTS_CHANNEL, QUARANTINE_CAP, ingest

UNKNOWN = "no-such-user@mta.example.net"
DEFERRED = "someone@deferred.example.net"


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection: `ingest` commits each message in its own transaction."""
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def _one(conn: psycopg.Connection[Any], query: str, *params: object) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0] if len(row) == 1 else row


def _status(conn: psycopg.Connection[Any], email_id: int) -> str:
    return str(_one(conn, "SELECT status FROM mailroom.email_queue WHERE id = %s", email_id))


def _listed(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT email, bounce_type, bounce_count, enhanced_code FROM mailroom.bounce_list ORDER BY email"
    ).fetchall()


def test_a_real_postfix_dsn_turns_the_email_bounced_and_lists_the_address_hard(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    email = sent_email(db_url, UNKNOWN)
    raw = readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY)
    outcome = ingest(auto, raw, FIXTURE_KEY)
    assert outcome.verdict == "recorded", outcome.detail
    assert _status(auto, email["id"]) == "bounced"
    assert _listed(auto) == [(UNKNOWN, "hard", 1, "5.1.1")]
    event = auto.execute(
        "SELECT email_id, recipient, kind, status, action, diagnostic, source, raw_size FROM mailroom.bounce_events"
    ).fetchall()
    assert event == [
        (
            email["id"],
            UNKNOWN,
            "hard",
            "5.1.1",
            "failed",
            'X-Postfix; unknown user: "no-such-user"',
            "dsn",
            len(raw),
        )
    ]
    assert "5.1.1" in _one(auto, "SELECT last_error FROM mailroom.email_queue WHERE id = %s", email["id"])


def test_a_redelivered_dsn_changes_nothing_twice(db_url: str, auto: psycopg.Connection[Any]) -> None:
    sender = _sender(db_url)
    email = sent_email(db_url, UNKNOWN, sender_id=sender)
    raw = readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY)
    assert ingest(auto, raw, FIXTURE_KEY).verdict == "recorded"
    assert ingest(auto, raw, FIXTURE_KEY).verdict == "duplicate"
    assert _listed(auto) == [(UNKNOWN, "hard", 1, "5.1.1")]
    assert _one(auto, "SELECT count(*) FROM mailroom.bounce_events") == 1
    assert (
        _one(auto, "SELECT sum(bounces) FROM mailroom.sender_usage WHERE sender_account_id = %s", sender) == 1
    )


def _sender(db_url: str) -> int:
    return add_sender(db_url, 25)


@pytest.mark.parametrize("forgery", ["altered", "other key"])
def test_a_forged_return_path_token_changes_nothing(
    db_url: str, auto: psycopg.Connection[Any], forgery: str
) -> None:
    email = sent_email(db_url, UNKNOWN)
    if forgery == "other key":
        raw = readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, derive_key(generate_key()))
    else:
        raw = readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY)
        token = raw.split(b"bounces+", 1)[1].split(b"@", 1)[0]
        raw = raw.replace(token, token[:-1] + (b"a" if token[-1:] != b"a" else b"b"))
    outcome = ingest(auto, raw, FIXTURE_KEY)
    assert outcome.verdict == "quarantined"
    assert "not authentic" in outcome.detail
    assert _status(auto, email["id"]) == "sent"
    assert _listed(auto) == []
    assert _one(auto, "SELECT count(*) FROM mailroom.bounce_events") == 0


def test_a_delay_notice_records_a_soft_bounce_and_giving_up_bounces_the_email(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    email = sent_email(db_url, DEFERRED)
    delayed = readdress(load("postfix-delayed.eml"), email["id"], DEFERRED, FIXTURE_KEY)
    assert ingest(auto, delayed, FIXTURE_KEY).verdict == "recorded"
    assert _status(auto, email["id"]) == "sent"
    assert _listed(auto) == [(DEFERRED, "soft", 1, "4.4.1")]
    expired = readdress(load("postfix-expired.eml"), email["id"], DEFERRED, FIXTURE_KEY)
    assert ingest(auto, expired, FIXTURE_KEY).verdict == "recorded"
    # Postfix gave up on a relay it could not reach: the email bounced, the address is not known bad.
    assert _status(auto, email["id"]) == "bounced"
    assert _listed(auto) == [(DEFERRED, "soft", 2, "4.4.1")]


def test_a_soft_bounce_never_downgrades_a_hard_one(db_url: str, auto: psycopg.Connection[Any]) -> None:
    email = sent_email(db_url, DEFERRED)
    auto.execute("INSERT INTO mailroom.bounce_list (email, bounce_type) VALUES (%s, 'hard')", (DEFERRED,))
    ingest(auto, readdress(load("postfix-delayed.eml"), email["id"], DEFERRED, FIXTURE_KEY), FIXTURE_KEY)
    assert _listed(auto) == [(DEFERRED, "hard", 1, None)]


def test_an_arf_complaint_suppresses_the_address_at_once_and_notifies(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    email = sent_email(db_url, "user@example.com")
    bare_id = email["message_id"].strip("<>").encode()
    raw = load("rfc5965-optional-fields.eml").replace(b"8787KJKJ3K4J3K4J3K4J3.mail@example.net", bare_id)
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {COMPLAINTS_CHANNEL}")
        outcome = ingest(auto, raw, FIXTURE_KEY)
        notices = list(listener.notifies(timeout=5, stop_after=1))
    assert outcome.verdict == "recorded", outcome.detail
    assert _listed(auto) == [("user@example.com", "complaint", 1, None)]
    assert _status(auto, email["id"]) == "sent"
    assert len(notices) == 1 and f'"email_id": {email["id"]}' in notices[0].payload
    assert "user@example.com" not in notices[0].payload


def test_a_complaint_outranks_an_earlier_hard_bounce_and_a_later_one_keeps_it(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    email = sent_email(db_url, UNKNOWN)
    auto.execute("INSERT INTO mailroom.bounce_list (email, bounce_type) VALUES (%s, 'complaint')", (UNKNOWN,))
    ingest(auto, readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY), FIXTURE_KEY)
    assert _listed(auto)[0][1] == "complaint"


# The returned original's To as providers return it: hidden, or the first To of every copy (each
# copy has the same To header; only the token, here the returned Return-Path, says whose it was).
@pytest.mark.parametrize("returned_to", [b"To: <Undisclosed Recipients>", b"To: <other@example.com>"])
def test_a_redacted_complaint_from_a_cc_recipient_lists_the_cc_its_return_path_names(
    db_url: str, auto: psycopg.Connection[Any], returned_to: bytes
) -> None:
    email = sent_email(db_url, "other@example.com", cc=["reader@example.com"])
    raw = load("rfc5965-simple.eml").replace(
        b"From: <somespammer@example.net>\nTo: <Undisclosed Recipients>",
        b"Return-Path: <bounces+x-aaaaaaaa-aaaaaaaaaaaaaaaa@bounces.example>\n"
        b"From: <somespammer@example.net>\n" + returned_to,
    )
    raw = readdress(raw, email["id"], "reader@example.com", FIXTURE_KEY)
    assert ingest(auto, raw, FIXTURE_KEY).verdict == "recorded"
    assert _listed(auto) == [("reader@example.com", "complaint", 1, None)]


def test_a_plain_text_exim_bounce_is_matched_by_the_returned_message_id(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    email = sent_email(db_url, "gone@example.net")
    raw = load("exim-plain.eml").replace(b"bounces+TOKEN@bounces.example", b"postmaster@example.org")
    raw = raw.replace(b"<MSGID>", email["message_id"].encode())
    assert ingest(auto, raw, FIXTURE_KEY).verdict == "recorded"
    assert _status(auto, email["id"]) == "bounced"
    assert _listed(auto) == [("gone@example.net", "hard", 1, "5.1.1")]


def test_a_message_id_of_another_email_matches_nothing(db_url: str, auto: psycopg.Connection[Any]) -> None:
    email = sent_email(db_url, "gone@example.net")
    neighbour = sent_email(db_url, "victim@example.net")
    # What a recipient of the first email can write for its neighbour: the next id with its own
    # recipient hash and MAC, or the neighbour's id in the old `<id.stamp@domain>` shape.
    _own_id, rcpt, mac = email["message_id"].strip("<>").split("@")[0].split(".")
    forged = [f"<{neighbour['id']}.{rcpt}.{mac}@example.org>", f"<{neighbour['id']}.18c3f2a@example.org>"]
    raw = load("exim-plain.eml").replace(b"bounces+TOKEN@bounces.example", b"postmaster@example.org")
    for message_id in forged:
        assert (
            ingest(auto, raw.replace(b"<MSGID>", message_id.encode()), FIXTURE_KEY).verdict == "quarantined"
        )
    assert _status(auto, email["id"]) == _status(auto, neighbour["id"]) == "sent"
    assert _listed(auto) == []


def test_a_report_about_an_address_the_email_was_not_sent_to_changes_nothing(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    email = sent_email(db_url, "ada@example.com")
    raw = readdress(load("rfc3464-multi-recipient.eml"), email["id"], "ada@example.com", FIXTURE_KEY)
    raw = raw.replace(
        b"To: <owner-info-mime@cs.utk.edu>",
        readdress(b"To: <bounces+x@bounces.example>", email["id"], "ada@example.com", FIXTURE_KEY),
    )
    outcome = ingest(auto, raw, FIXTURE_KEY)
    assert outcome.verdict == "quarantined" and "no recipient" in outcome.detail
    assert _listed(auto) == [] and _status(auto, email["id"]) == "sent"


def test_a_dsn_naming_a_cc_recipient_lists_that_address(db_url: str, auto: psycopg.Connection[Any]) -> None:
    email = sent_email(db_url, "ada@example.com", cc=[UNKNOWN])
    raw = readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY)
    assert ingest(auto, raw, FIXTURE_KEY).verdict == "recorded"
    assert _listed(auto) == [(UNKNOWN, "hard", 1, "5.1.1")]


def test_one_recipients_token_with_a_dsn_naming_another_recipient_acts_for_nobody(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    # The Cc recipient writes a DSN about the To recipient and sends it to its own return path.
    email = sent_email(db_url, UNKNOWN, cc=["attacker@example.com"])
    raw = readdress(load("postfix-unknown-user.eml"), email["id"], "attacker@example.com", FIXTURE_KEY)
    assert ingest(auto, raw, FIXTURE_KEY).verdict == "quarantined"
    assert _listed(auto) == [] and _status(auto, email["id"]) == "sent"


def test_an_unreadable_message_is_quarantined_once_and_size_capped(auto: psycopg.Connection[Any]) -> None:
    raw = b"Subject: hello\n\n" + os.urandom(300 * 1024)
    assert ingest(auto, raw, FIXTURE_KEY, ["bounces@bounces.example"]).verdict == "quarantined"
    assert ingest(auto, raw, FIXTURE_KEY).verdict == "quarantined"
    rows = auto.execute(
        "SELECT length(raw), raw_size, envelope_recipient FROM mailroom.bounce_quarantine"
    ).fetchall()
    assert rows == [(QUARANTINE_CAP, len(raw), "bounces@bounces.example")]


def test_a_success_report_is_ignored(db_url: str, auto: psycopg.Connection[Any]) -> None:
    email = sent_email(db_url, UNKNOWN)
    raw = load("postfix-unknown-user.eml").replace(
        b"Action: failed\nStatus: 5.1.1", b"Action: delivered\nStatus: 2.0.0"
    )
    assert ingest(auto, readdress(raw, email["id"], UNKNOWN, FIXTURE_KEY), FIXTURE_KEY).verdict == "ignored"
    assert _listed(auto) == [] and _status(auto, email["id"]) == "sent"
    assert _one(auto, "SELECT count(*) FROM mailroom.bounce_quarantine") == 0


def test_a_forwarded_address_in_the_only_report_counts_for_the_recipient_the_token_names(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    email = sent_email(db_url, "ada@example.com")
    raw = load("postfix-unknown-user.eml").replace(
        b"Original-Recipient: rfc822;no-such-user@mta.example.net\n", b""
    )
    assert (
        ingest(auto, readdress(raw, email["id"], "ada@example.com", FIXTURE_KEY), FIXTURE_KEY).verdict
        == "recorded"
    )
    assert _listed(auto) == [("ada@example.com", "hard", 1, "5.1.1")]
