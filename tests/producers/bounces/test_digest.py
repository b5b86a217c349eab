"""The complaint digest: one email per period to the administrators, through the queue, each complaint told once."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.producers.bounces.corpus import FIXTURE_KEY, load, sent_email
from tests.worker.helpers import add_sender
from worker.core.config import ConfigError, Settings
from worker.core.webhook_events import WebhookEvent
from worker.producers.bounces import ingest
from worker.producers.bounces.digest import digest_once
from worker.producers.bounces.events import apply_events

ADMINS = ("ops@example.org", "oncall@example.org")
T0 = datetime(2026, 11, 25, 10, 5, tzinfo=UTC)


@pytest.fixture
def admins(settings: Settings) -> Settings:
    return replace(settings, admin_emails=ADMINS, complaint_digest_seconds=3600.0)


def _complain(db_url: str, to: str, *, sender_id: int | None = None) -> int:
    """A sent email to `to` and a webhook complaint about it; the email's id."""
    email = sent_email(db_url, to, sender_id=sender_id)
    with psycopg.connect(db_url) as conn:
        event = WebhookEvent("webhook", to, "complaint", f"c-{email['id']}", b"{}", email_id=email["id"])
        [outcome] = apply_events(conn, [event])
    assert outcome.verdict == "recorded"
    return int(email["id"])


def _digests(db_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT d.complaints, q.recipient_email, q.to_extra, q.subject, q.text_body, q.status"
            " FROM mailroom.complaint_digests d JOIN mailroom.email_queue q ON q.id = d.email_id ORDER BY d.id"
        ).fetchall()


async def _run(db_url: str, settings: Settings, now: datetime) -> int:
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        return await digest_once(conn, settings, now=now)


async def test_complaints_make_one_digest_per_period_to_every_administrator(
    db_url: str, admins: Settings
) -> None:
    sender = add_sender(db_url, 25)
    for to in ("angry@example.com", "cross@example.net", "mad@example.com"):
        _complain(db_url, to, sender_id=sender)
    assert await _run(db_url, admins, T0) == 1
    # a fourth complaint in the same period waits: never one email per complaint
    _complain(db_url, "late@example.com", sender_id=sender)
    assert await _run(db_url, admins, T0 + timedelta(minutes=50)) == 0
    [(count, to, extra, subject, text, status)] = _digests(db_url)
    assert (count, to, extra, status) == (3, ADMINS[0], [ADMINS[1]], "pending")
    assert subject == "Mailroom: 3 new complaints"
    # addresses masked as in the logs; the sender's standing and where to see them in full
    assert "angry@example.com" not in text and "ang***@example.com" in text
    assert "primary: no deliveries on record" in text  # these emails have no send logs
    assert "mailroom bounces list --kind complaint" in text
    # the next period tells of the fourth complaint only
    assert await _run(db_url, admins, T0 + timedelta(hours=1)) == 1
    assert await _run(db_url, admins, T0 + timedelta(hours=2)) == 0  # nothing new: no empty digest
    digests = _digests(db_url)
    assert [d[0] for d in digests] == [3, 1] and "lat***@example.com" in digests[1][4]


async def test_without_administrators_complaints_wait_for_the_first_digest(
    db_url: str, settings: Settings
) -> None:
    _complain(db_url, "angry@example.com")
    assert await _run(db_url, settings, T0) == 0
    assert _digests(db_url) == []
    assert await _run(db_url, replace(settings, admin_emails=ADMINS), T0) == 1
    assert [d[0] for d in _digests(db_url)] == [1]


async def test_two_workers_in_one_period_make_one_digest(db_url: str, admins: Settings) -> None:
    """The second worker's digest runs while the first one's transaction is still open: it waits on the
    period's unique row, then finds the period taken and enqueues nothing."""
    _complain(db_url, "angry@example.com")
    async with (
        await psycopg.AsyncConnection.connect(db_url) as first,
        await psycopg.AsyncConnection.connect(db_url) as second,
    ):
        async with first.transaction():
            assert await digest_once(first, admins, now=T0) == 1
            racing = asyncio.create_task(digest_once(second, admins, now=T0))
            await _blocked(db_url, second.info.backend_pid)
        assert await racing == 0
    assert [d[0] for d in _digests(db_url)] == [1]


async def _blocked(db_url: str, pid: int) -> None:
    """Until the backend `pid` waits on a lock (bounded: the test's timeout ends a hang)."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as watcher:
        while True:
            cur = await watcher.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
            )
            row = await cur.fetchone()
            if row is not None and row[0]:
                return
            await asyncio.sleep(0.01)


async def test_a_complaint_committed_after_a_later_one_was_told_is_told_next(
    db_url: str, admins: Settings
) -> None:
    """Complaints are marked told, not counted by id: an id taken before the digest but committed
    after it still makes the next digest."""
    with psycopg.connect(db_url) as slow:
        email = sent_email(db_url, "slow@example.com")
        event = WebhookEvent("webhook", "slow@example.com", "complaint", "slow", b"{}", email_id=email["id"])
        slow.execute("SELECT 1")  # a transaction is open: apply_events' block is a savepoint in it
        apply_events(slow, [event])  # inserted, not committed yet
        _complain(db_url, "fast@example.com")
        assert await _run(db_url, admins, T0) == 1
        slow.commit()
    assert await _run(db_url, admins, T0 + timedelta(hours=1)) == 1
    assert [d[0] for d in _digests(db_url)] == [1, 1]


async def test_an_arf_report_through_the_intake_reaches_the_digest_with_the_senders_standing(
    db_url: str, admins: Settings
) -> None:
    sender = add_sender(db_url, 25)
    email = sent_email(db_url, "user@example.com", sender_id=sender)
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.send_logs (email_id, sender_account_id, recipient_email, attempt, outcome)"
            " VALUES (%s, %s, 'user@example.com', 1, 'sent')",
            (email["id"], sender),
        )
    bare_id = email["message_id"].strip("<>").encode()
    raw = load("rfc5965-optional-fields.eml").replace(b"8787KJKJ3K4J3K4J3K4J3.mail@example.net", bare_id)
    with psycopg.connect(db_url, autocommit=True) as auto:
        assert ingest(auto, raw, FIXTURE_KEY).verdict == "recorded"
    assert await _run(db_url, admins, T0) == 1
    [(count, _to, _extra, _subject, text, _status)] = _digests(db_url)
    assert (
        count == 1
        and "primary: 1 complaint(s), 0 hard bounce(s) in 1 deliveries (100.00% complaints)" in text
    )


def test_administrator_addresses_are_checked_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAILROOM_ADMIN_EMAILS", "ops@example.org, OPS@example.org oncall@example.org")
    assert Settings.from_env().admin_emails == ("ops@example.org", "OPS@example.org", "oncall@example.org")
    monkeypatch.setenv("MAILROOM_ADMIN_EMAILS", "ops@example.org,not an address")
    with pytest.raises(ConfigError, match="MAILROOM_ADMIN_EMAILS: 'not' is not an email address"):
        Settings.from_env()
    monkeypatch.setenv("MAILROOM_ADMIN_EMAILS", "ops@example.org\r\nBcc: x@example.org")
    with pytest.raises(ConfigError, match="MAILROOM_ADMIN_EMAILS"):
        Settings.from_env()
