"""Birthday events that know their outcome (reference 02): the event follows its email through a real
worker and SMTP sink; a render or enqueue failure is retried with backoff on the engine's clock."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.worker.helpers import add_sender, refuse_writes, run_until_drained
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.devtools.sink import RunningSink
from worker.engine.clock import MovedClock
from worker.engine.delivery import Worker, WorkerOptions
from worker.producers.birthdays import add_person, run_scheduler, update_person
from worker.producers.birthdays.scheduler import RETRY_BACKOFF_SECONDS

Conn = psycopg.Connection[dict[str, Any]]
ADDED = datetime(2026, 6, 1, tzinfo=UTC)
# A stored template the birthday email cannot render with: it needs a variable the event does not give.
BROKEN_TEMPLATE = (
    "INSERT INTO mailroom.templates (name, locale, subject, text_body)"
    " VALUES ('birthday', 'en', 'Hello {{ nickname }}', 'Happy birthday')"
)


def _add(conn: Conn, settings: Settings, name: str, born: date, zone: str, now: datetime) -> UUID:
    person = add_person(
        conn,
        email=f"{name.lower()}@example.com",
        first_name=name,
        last_name="Tester",
        date_of_birth=born,
        time_zone=zone,
        settings=settings,
        now=now,
    )
    conn.commit()
    return person


def _events(conn: Conn, person: UUID) -> list[dict[str, Any]]:
    conn.rollback()  # a fresh snapshot: what others committed since
    return conn.execute(
        "SELECT * FROM mailroom.events WHERE person_id = %s ORDER BY local_due_at", (person,)
    ).fetchall()


async def _scheduler(db_url: str, settings: Settings, now: datetime) -> Any:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        return await run_scheduler(aconn, settings, now=now)


async def _queue_birthday(db_url: str, conn: Conn, settings: Settings, name: str = "Ada") -> UUID:
    """A person whose 15 June birthday the scheduler has just handed to the queue."""
    person = _add(conn, settings, name, date(1990, 6, 15), "Europe/London", ADDED)
    done = await _scheduler(db_url, settings, datetime(2026, 6, 15, 8, 30, tzinfo=UTC))
    assert len(done.sent) == 1
    assert [e["status"] for e in _events(conn, person)] == ["queued", "pending"]
    return person


async def test_a_permanent_refusal_fails_the_event_with_the_relays_words(
    db_url: str, conn: Conn, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_rcpt("ada@example.com", "550 5.1.1 User unknown")
    person = await _queue_birthday(db_url, conn, settings)
    await run_until_drained(db_url, settings)
    failed, upcoming = _events(conn, person)
    assert failed["status"] == "failed" and failed["executed_at"] is None
    assert failed["failure_reason"].startswith("the email failed: ")
    assert "550 5.1.1 User unknown" in failed["failure_reason"]
    assert upcoming["status"] == "pending" and upcoming["local_due_at"] == datetime(2027, 6, 15, 9, 0)

    # An operator retries the email (the mailbox exists again): the event is queued, then completed.
    smtp_sink.clear()
    conn.execute("DELETE FROM mailroom.bounce_list")
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'pending', retry_count = 0 WHERE id = %s",
        (failed["email_id"],),
    )
    conn.commit()
    assert (
        _events(conn, person)[0]["status"] == "queued" and _events(conn, person)[0]["failure_reason"] is None
    )
    assert await run_until_drained(db_url, settings) == 1
    completed = _events(conn, person)[0]
    assert completed["status"] == "completed" and completed["executed_at"] is not None


async def test_a_birthday_email_goes_out_with_no_postal_address_configured(
    db_url: str, conn: Conn, settings: Settings, smtp_sink: RunningSink
) -> None:
    # A greeting is not commercial email: no campaign, so no postal address is required (CAN-SPAM's
    # is for a campaign's email). It was refused at enqueue, retried three times, and failed.
    bare = replace(settings, postal_address=None)
    add_sender(db_url, smtp_sink.port)
    person = await _queue_birthday(db_url, conn, bare)

    assert await run_until_drained(db_url, bare) == 1

    [received] = smtp_sink.messages
    assert received.rcpt_tos == ("ada@example.com",) and received.message["List-Id"] is None
    assert received.message["List-Unsubscribe"] is not None  # not transactional: it can be unsubscribed
    assert _events(conn, person)[0]["status"] == "completed"


async def test_a_recipient_suppressed_before_or_after_the_handover_fails_the_event(
    db_url: str, conn: Conn, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    # On the bounce list before the birthday came due: suppressed as it is enqueued, or at the claim.
    conn.execute(
        "INSERT INTO mailroom.bounce_list (email, bounce_type, reason) VALUES ('ada@example.com', 'hard', 'gone')"
    )
    conn.commit()
    ada = _add(conn, settings, "Ada", date(1990, 6, 15), "Europe/London", ADDED)
    # Unsubscribed after its email was queued (a birthday is not transactional): suppressed at the claim.
    alan = _add(conn, settings, "Alan", date(1990, 6, 15), "Europe/London", ADDED)
    done = await _scheduler(db_url, settings, datetime(2026, 6, 15, 8, 30, tzinfo=UTC))
    assert len(done.sent) + len(done.failed) == 2
    conn.execute("INSERT INTO mailroom.unsubscribe_list (email, reason) VALUES ('alan@example.com', 'asked')")
    conn.commit()
    assert await run_until_drained(db_url, settings) == 0
    assert smtp_sink.messages == []
    for person in (ada, alan):
        event = _events(conn, person)[0]
        assert event["status"] == "failed", event
        assert event["failure_reason"].startswith("the recipient is suppressed: ")
    assert "bounce list" in _events(conn, ada)[0]["failure_reason"]
    assert "unsubscribed" in _events(conn, alan)[0]["failure_reason"]


async def test_an_email_past_the_queue_lifetime_fails_its_event_as_expired(
    db_url: str, conn: Conn, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    person = await _queue_birthday(db_url, conn, settings)
    clock = MovedClock()
    clock.advance(settings.queue_lifetime_seconds + 3600)  # the relay was down for longer than that
    worker = Worker(db_url, settings, WorkerOptions(concurrency=1, drain=True, poll_seconds=0.2, clock=clock))
    await asyncio.wait_for(worker.run(), timeout=60)
    event = _events(conn, person)[0]
    assert event["status"] == "failed" and event["failure_reason"].startswith("the email expired: ")
    assert smtp_sink.messages == []


def _due_today(now: datetime) -> tuple[date, str]:
    """A date of birth and a zone where today's 09:00 has passed and the local day has hours left."""
    zone = next(
        z
        for z in (
            "Pacific/Kiritimati",
            "Asia/Kathmandu",
            "Europe/London",
            "America/New_York",
            "Pacific/Pago_Pago",
        )
        if 10 <= now.astimezone(ZoneInfo(z)).hour <= 21
    )
    today = now.astimezone(ZoneInfo(zone)).date()
    return date(1990, today.month, today.day if (today.month, today.day) != (2, 29) else 28), zone


async def test_a_render_failure_is_retried_with_backoff_up_to_3_times_then_fails(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    clock = MovedClock()
    born, zone = _due_today(clock.now())
    person = _add(conn, settings, "Ada", born, zone, clock.now())
    conn.execute(BROKEN_TEMPLATE)
    conn.commit()
    for retry, backoff in enumerate(RETRY_BACKOFF_SECONDS, start=1):
        done = await _scheduler(db_url, settings, clock.now())
        assert len(done.retried) == 1 and done.sent == done.failed == []
        [event] = _events(conn, person)  # still the one event: next year waits until this one is done
        assert (event["status"], event["retry_count"]) == ("pending", retry)
        assert "needs 'nickname' is undefined" in event["failure_reason"]
        assert abs(event["retry_at"] - (clock.now() + timedelta(seconds=backoff))) < timedelta(seconds=5)
        # Not before its backoff has passed ...
        clock.advance(backoff - 10)
        assert (await _scheduler(db_url, settings, clock.now())).handled == 0
        clock.advance(10)  # ... then at once
    done = await _scheduler(db_url, settings, clock.now())
    assert len(done.failed) == 1
    failed, upcoming = _events(conn, person)
    assert (failed["status"], failed["retry_count"]) == ("failed", 3)
    assert failed["failure_reason"].startswith("cannot be rendered or enqueued: ")
    assert failed["failure_reason"].endswith("(after 3 retries)")
    assert (
        upcoming["status"] == "pending" and upcoming["local_due_at"].year == failed["local_due_at"].year + 1
    )
    assert conn.execute("SELECT count(*) AS n FROM mailroom.email_queue").fetchone() == {"n": 0}


async def test_a_retry_after_the_template_is_fixed_sends_and_clears_the_error(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    clock = MovedClock()
    born, zone = _due_today(clock.now())
    person = _add(conn, settings, "Ada", born, zone, clock.now())
    conn.execute(BROKEN_TEMPLATE)
    conn.commit()
    assert len((await _scheduler(db_url, settings, clock.now())).retried) == 1
    conn.execute("DELETE FROM mailroom.templates WHERE name = 'birthday'")  # an operator fixes it
    conn.commit()
    clock.advance(RETRY_BACKOFF_SECONDS[0])
    assert len((await _scheduler(db_url, settings, clock.now())).sent) == 1
    queued = _events(conn, person)[0]
    assert (queued["status"], queued["retry_count"], queued["failure_reason"]) == ("queued", 1, None)


async def test_the_database_refusing_the_email_is_retried_and_the_event_kept(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    person = _add(conn, settings, "Ada", date(1990, 6, 15), "Europe/London", ADDED)
    refuse_writes(conn, "email_queue", message="the queue is closed for maintenance")
    conn.commit()
    at = datetime(2026, 6, 15, 8, 30, tzinfo=UTC)
    assert len((await _scheduler(db_url, settings, at)).retried) == 1
    [event] = _events(conn, person)
    assert (event["status"], event["retry_count"]) == ("pending", 1)
    assert event["failure_reason"] == "the database refused its email: the queue is closed for maintenance"
    # Past its local day, the retry is missed with the last error, never sent a day late.
    done = await _scheduler(db_url, settings, datetime(2026, 6, 16, 8, 30, tzinfo=UTC))
    assert len(done.missed) == 1
    missed = _events(conn, person)[0]
    assert missed["status"] == "missed" and "the queue is closed for maintenance" in missed["failure_reason"]


async def test_an_email_that_only_names_an_event_cannot_change_it(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    person = await _queue_birthday(db_url, conn, settings)
    event = _events(conn, person)[0]
    # Any application role may enqueue an email that claims to be about an event (or a malformed one).
    forged = [
        enqueue(
            conn,
            EmailRequest(
                to="mallory@example.com", subject="x", text="y", reference_type="event", reference_id=ref
            ),
            settings=settings,
        )
        for ref in (str(event["id"]), "not-a-uuid'; DROP TABLE mailroom.events; --", "")
    ]
    conn.commit()
    conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = ANY(%s)", (forged,))
    conn.commit()
    after = _events(conn, person)[0]
    assert (after["status"], after["version"], after["failure_reason"]) == ("queued", event["version"], None)


def test_the_payload_is_recorded_at_creation_and_kept_current_while_waiting(
    conn: Conn, settings: Settings
) -> None:
    person = _add(conn, settings, "Ada", date(1990, 6, 15), "Europe/London", ADDED)
    [event] = _events(conn, person)
    assert event["delivery_payload"] == {
        "template": "birthday",
        "locale": "en",
        "data": {"first_name": "Ada", "last_name": "Tester"},
    }
    update_person(conn, person, {"first_name": "Augusta", "locale": "fr"}, settings=settings, now=ADDED)
    conn.commit()
    [event] = _events(conn, person)
    assert event["delivery_payload"]["data"]["first_name"] == "Augusta"
    assert event["delivery_payload"]["locale"] == "fr"
    # The database refuses a payload that does not say which template, by the constraint's name.
    with pytest.raises(psycopg.errors.CheckViolation, match="events_delivery_payload_names_template"):
        conn.execute('UPDATE mailroom.events SET delivery_payload = \'{"locale": "en"}\'')
    conn.rollback()
    with pytest.raises(psycopg.errors.CheckViolation, match="events_retry_count_range"):
        conn.execute("UPDATE mailroom.events SET retry_count = 4")
    conn.rollback()


async def test_a_queued_event_keeps_what_it_sent_when_the_person_is_renamed(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    person = await _queue_birthday(db_url, conn, settings)
    update_person(conn, person, {"first_name": "Augusta"}, settings=settings, now=ADDED)
    conn.commit()
    queued, upcoming = _events(conn, person)
    assert queued["delivery_payload"]["data"]["first_name"] == "Ada"  # what went to the queue
    assert upcoming["delivery_payload"]["data"]["first_name"] == "Augusta"
    with psycopg.connect(db_url, row_factory=dict_row) as other:
        email = other.execute(
            "SELECT subject, template_data FROM mailroom.email_queue WHERE id = %s", (queued["email_id"],)
        ).fetchone()
    assert email is not None and email["template_data"]["first_name"] == "Ada"


async def test_people_commands_show_status_reason_and_retries(
    db_url: str,
    conn: Conn,
    settings: Settings,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    smtp_sink: RunningSink,
) -> None:
    from tests.cli import run

    add_sender(db_url, smtp_sink.port, settings=settings)
    smtp_sink.on_rcpt("ada@example.com", "550 5.1.1 User unknown")
    ada = await _queue_birthday(db_url, conn, settings)
    await run_until_drained(db_url, settings)
    clock = MovedClock()
    born, zone = _due_today(clock.now())
    alan = _add(conn, settings, "Alan", born, zone, clock.now())
    conn.execute(BROKEN_TEMPLATE)
    conn.commit()
    assert len((await _scheduler(db_url, settings, clock.now())).retried) == 1

    code, out, err = run(capsys, "events", "list")
    assert code == 0 and err == "2 event(s)\n"
    lines = out.splitlines()
    assert lines[0].split() == ["STATUS", "BIRTHDAY", "NAME", "RETRIES", "EMAIL", "EVENT"]
    assert lines[1].startswith("retrying") and "Alan Tester" in lines[1] and " 1/3 " in lines[1]
    assert lines[2].startswith("  next attempt ") and lines[3].startswith(
        "  cannot be rendered or enqueued: "
    )
    assert lines[4].startswith("failed") and "Ada Tester" in lines[4]
    assert "the email failed: " in lines[5] and "550 5.1.1 User unknown" in lines[5]

    code, out, _ = run(capsys, "events", "list", "--status", "failed", "--json")
    [failed] = json.loads(out)
    assert (failed["person_id"], failed["status"], failed["retry_count"]) == (str(ada), "failed", 0)
    code, out, _ = run(capsys, "events", "list", "--person", str(ada))
    assert [line.split()[0] for line in out.splitlines()[1:] if not line.startswith(" ")] == [
        "pending",
        "failed",
    ]

    code, out, _ = run(capsys, "events", "upcoming", "--hours", "48")
    row = next(line for line in out.splitlines() if "Alan Tester" in line)
    assert " 1/3 " in row
    assert "last attempt: cannot be rendered or enqueued" in out
    assert row.endswith(str(_events(conn, alan)[0]["id"]))

    code, _, err = run(capsys, "events", "list", "--status", "completed")
    assert code == 2 and "completed" in err
