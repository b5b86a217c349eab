"""Birthday scheduling (reference 02) against a real PostgreSQL, with a controllable clock."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.worker.helpers import add_sender, run_until_drained
from worker.core.config import Settings
from worker.core.validation import ValidationError
from worker.devtools.sink import RunningSink
from worker.producers.birthdays import (
    Claimed,
    add_person,
    claim_due,
    delete_person,
    finish_event,
    run_scheduler,
    schedule_everyone,
    schedule_missing,
    upcoming_events,
    update_person,
)

Conn = psycopg.Connection[dict[str, Any]]
ZONES = (
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
)


def expected_due(born: date, zone: str, now: datetime, at: time = time(9)) -> datetime:
    """Reference model: the first birthday whose local day has not ended, at `at` local time."""
    tz = ZoneInfo(zone)
    start = max(now.astimezone(tz).date(), born + timedelta(days=1))
    for year in (start.year, start.year + 1):
        try:
            day = born.replace(year=year)
        except ValueError:
            day = date(year, 2, 28)  # 29 February in a common year
        if day >= start:
            return datetime.combine(day, at, tzinfo=tz).astimezone(UTC)
    raise AssertionError("unreachable")


def _add(conn: Conn, settings: Settings, name: str, born: date, zone: str, now: datetime, **kw: Any) -> UUID:
    return add_person(
        conn,
        email=f"{name.lower()}@example.com",
        first_name=name,
        last_name="Tester",
        date_of_birth=born,
        time_zone=zone,
        settings=settings,
        now=now,
        **kw,
    )


def _events(conn: Conn, person: UUID) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM mailroom.events WHERE person_id = %s ORDER BY due_at", (person,)
    ).fetchall()


def _pending(conn: Conn, person: UUID) -> dict[str, Any]:
    [event] = [e for e in _events(conn, person) if e["status"] == "pending"]
    return event


async def _scheduler(db_url: str, settings: Settings, now: datetime) -> Any:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        return await run_scheduler(aconn, settings, now=now)


def test_time_zone_matrix_schedules_nine_local_time(conn: Conn, settings: Settings) -> None:
    # Birthdays on daylight-saving change days included: New York springs forward on 14 March 2027,
    # London falls back on 25 October 2026, Lord Howe moves by 30 minutes on 4 October 2026.
    births = [date(1990, 6, 16), date(1985, 3, 14), date(1979, 10, 25), date(2001, 10, 4), date(1995, 1, 1)]
    clocks = [datetime(2026, 6, 15, 10, 30, tzinfo=UTC), datetime(2026, 12, 31, 23, 0, tzinfo=UTC)]
    checked = 0
    for c, now in enumerate(clocks):
        for z, zone in enumerate(ZONES):
            for b, born in enumerate(births):
                person = _add(conn, settings, f"P{c}x{z}x{b}", born, zone, now)
                event = _pending(conn, person)
                want = expected_due(born, zone, now)
                assert event["due_at"] == want, (zone, born, now)
                assert event["local_due_at"] == want.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
                assert event["local_due_at"].time() == time(9) and event["time_zone"] == zone
                assert event["idempotency_key"] == f"birthday:{person}:{event['local_due_at'].date()}"
                checked += 1
    assert checked == 60
    # One UTC instant, different local days: at 15 June 10:30 UTC it is 16 June 00:30 in Kiritimati (+14),
    # so the 16 June birthday is due in 8.5 hours there, but 15 June 23:30 in Pago Pago (-11).
    kiritimati = _pending(conn, _find(conn, "P0x4x0"))
    pago = _pending(conn, _find(conn, "P0x5x0"))
    assert kiritimati["due_at"] == datetime(2026, 6, 15, 19, 0, tzinfo=UTC)
    assert pago["due_at"] == datetime(2026, 6, 16, 20, 0, tzinfo=UTC)


def _find(conn: Conn, name: str) -> UUID:
    row = conn.execute("SELECT id FROM mailroom.people WHERE first_name = %s", (name,)).fetchone()
    assert row is not None
    return UUID(str(row["id"]))


def test_29_february_falls_on_28_february_in_common_years(conn: Conn, settings: Settings) -> None:
    leapling = _add(
        conn, settings, "Leap", date(2000, 2, 29), "Europe/London", datetime(2026, 1, 10, tzinfo=UTC)
    )
    assert _pending(conn, leapling)["local_due_at"] == datetime(2026, 2, 28, 9, 0)
    later = _add(
        conn, settings, "Later", date(2000, 2, 29), "Europe/London", datetime(2027, 12, 1, tzinfo=UTC)
    )
    assert _pending(conn, later)["local_due_at"] == datetime(2028, 2, 29, 9, 0)


def test_daylight_saving_gap_and_fold_follow_the_documented_rule(conn: Conn, settings: Settings) -> None:
    # 02:30 does not exist on 14 March 2027 in New York: read with the offset before the jump -> 03:30 EDT.
    gap = _add(
        conn,
        replace(settings, birthday_local_time="02:30"),
        "Gap",
        date(1990, 3, 14),
        "America/New_York",
        datetime(2027, 3, 1, tzinfo=UTC),
    )
    event = _pending(conn, gap)
    assert event["due_at"] == datetime(2027, 3, 14, 7, 30, tzinfo=UTC)
    assert event["local_due_at"] == datetime(2027, 3, 14, 3, 30)
    # 01:30 happens twice on 1 November 2026 in New York: the second (standard time, EST) is used.
    fold = _add(
        conn,
        replace(settings, birthday_local_time="01:30"),
        "Fold",
        date(1990, 11, 1),
        "America/New_York",
        datetime(2026, 10, 1, tzinfo=UTC),
    )
    assert _pending(conn, fold)["due_at"] == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)


def test_bad_profiles_are_clear_errors_and_store_nothing(conn: Conn, settings: Settings) -> None:
    now = datetime.now(UTC)
    with pytest.raises(ValidationError, match="unknown time zone 'Mars/Olympus_Mons'"):
        _add(conn, settings, "Ada", date(1990, 1, 1), "Mars/Olympus_Mons", now)
    with pytest.raises(ValidationError, match="must be in the past"):
        _add(conn, settings, "Ada", now.date() + timedelta(days=3), "Europe/London", now)
    with pytest.raises(ValidationError, match="control character"):
        _add(conn, settings, "Ada\r\nBcc: x", date(1990, 1, 1), "Europe/London", now)
    conn.commit()
    assert conn.execute("SELECT count(*) AS n FROM mailroom.people").fetchone() == {"n": 0}
    # The database refuses an unknown zone too, whoever writes.
    with pytest.raises(psycopg.errors.CheckViolation, match="unknown time zone"):
        conn.execute(
            "INSERT INTO mailroom.people (email, first_name, last_name, date_of_birth, time_zone)"
            " VALUES ('x@example.com', 'X', 'Y', '1990-01-01', 'Nowhere/City')"
        )


def test_changing_zone_or_birth_date_reschedules_and_deleting_removes_events(
    conn: Conn, settings: Settings
) -> None:
    now = datetime(2026, 6, 1, 12, tzinfo=UTC)
    person = _add(conn, settings, "Ada", date(1990, 6, 15), "Europe/London", now)
    before = _pending(conn, person)
    moved = update_person(conn, person, {"time_zone": "Asia/Kathmandu"}, settings=settings, now=now)
    after = _pending(conn, person)
    assert after["id"] == before["id"] and after["version"] == before["version"] + 1
    assert after["due_at"] == expected_due(date(1990, 6, 15), "Asia/Kathmandu", now)
    assert after["time_zone"] == "Asia/Kathmandu"
    update_person(
        conn,
        person,
        {"date_of_birth": date(1990, 7, 1)},
        settings=settings,
        now=now,
        expected_version=moved.version,
    )
    assert _pending(conn, person)["local_due_at"] == datetime(2026, 7, 1, 9, 0)
    # A stale person version is refused and changes nothing.
    with pytest.raises(ValidationError, match="not 1: someone changed it"):
        update_person(conn, person, {"time_zone": "UTC"}, settings=settings, expected_version=1)
    assert _pending(conn, person)["time_zone"] == "Asia/Kathmandu"
    # A name change leaves the event alone.
    update_person(conn, person, {"first_name": "Adele"}, settings=settings, now=now)
    assert _pending(conn, person)["version"] == after["version"] + 1
    assert delete_person(conn, person)
    assert _events(conn, person) == []


async def test_due_event_is_mailed_once_completed_and_next_year_scheduled(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    added = datetime(2026, 6, 1, tzinfo=UTC)
    person = _add(conn, settings, "Ada", date(1990, 6, 15), "Asia/Kathmandu", added, locale="fr")
    conn.commit()
    due = _pending(conn, person)["due_at"]
    assert (await _scheduler(db_url, settings, due - timedelta(seconds=1))).handled == 0

    done = await _scheduler(db_url, settings, due + timedelta(seconds=5))
    assert len(done.sent) == 1 and done.missed == done.stale == []
    events = _events(conn, person)
    # queued: handed to the queue; it completes when the relay accepts the email (not before)
    assert [e["status"] for e in events] == ["queued", "pending"]
    assert events[0]["executed_at"] is None
    assert events[0]["delivery_payload"] == {
        "template": "birthday",
        "locale": "fr",
        "data": {"first_name": "Ada", "last_name": "Tester"},
    }
    assert events[1]["local_due_at"] == datetime(2027, 6, 15, 9, 0)
    email = conn.execute("SELECT * FROM mailroom.email_queue").fetchone()
    assert email is not None and email["id"] == events[0]["email_id"]
    assert email["subject"] == "Joyeux anniversaire, Ada !"
    assert email["idempotency_key"] == f"birthday:{person}:2026-06-15"
    assert (await _scheduler(db_url, settings, due + timedelta(seconds=6))).handled == 0

    # Even if the same birthday came round again (an operator re-pended it), it is never mailed twice.
    conn.execute("DELETE FROM mailroom.events WHERE status = 'pending'")
    conn.execute("UPDATE mailroom.events SET status = 'pending', executed_at = NULL")
    conn.commit()
    await _scheduler(db_url, settings, due + timedelta(seconds=7))
    assert conn.execute("SELECT count(*) AS n FROM mailroom.email_queue").fetchone() == {"n": 1}


async def test_stale_completion_changes_nothing_and_is_dropped(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    added = datetime(2026, 6, 1, tzinfo=UTC)
    ada = _add(conn, settings, "Ada", date(1990, 6, 15), "Europe/London", added)
    bob = _add(conn, settings, "Bob", date(1990, 6, 15), "Europe/London", added)
    conn.commit()
    now = _pending(conn, ada)["due_at"] + timedelta(minutes=1)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        claimed = {c.person_id: c for c in await claim_due(aconn, now=now)}
        assert set(claimed) == {ada, bob}
        # Ada moves to Kathmandu after the claim: her event is rescheduled (version moves on).
        update_person(conn, ada, {"time_zone": "America/New_York"}, settings=settings, now=now)
        conn.commit()
        assert await finish_event(aconn, claimed[ada], settings, now=now) == "stale"
        # A forged older version of Bob's claim is stale too; the real one completes.
        old: Claimed = replace(claimed[bob], version=claimed[bob].version - 1)
        assert await finish_event(aconn, old, settings, now=now) == "stale"
        assert await finish_event(aconn, claimed[bob], settings, now=now) == "sent"
    ada_event = _pending(conn, ada)
    assert ada_event["status"] == "pending" and ada_event["time_zone"] == "America/New_York"
    assert ada_event["version"] == claimed[ada].version + 1 and ada_event["email_id"] is None
    rows = conn.execute("SELECT recipient_email FROM mailroom.email_queue").fetchall()
    assert rows == [{"recipient_email": "bob@example.com"}]
    # The rescheduled event (09:00 in New York, same local day) is still sent that day.
    done = await _scheduler(db_url, settings, ada_event["due_at"])
    assert len(done.sent) == 1


async def test_downtime_catch_up_sends_the_same_local_day_and_marks_ended_days_missed(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    added = datetime(2026, 6, 1, tzinfo=UTC)
    # Both due 15 June 09:00 local; the scheduler comes back on 15 June 22:00 UTC, when it is already
    # 16 June in Kiritimati (day ended: missed) but still 15 June 11:00 in Pago Pago (sent).
    kiri = _add(conn, settings, "Kiri", date(1990, 6, 15), "Pacific/Kiritimati", added)
    pago = _add(conn, settings, "Pago", date(1990, 6, 15), "Pacific/Pago_Pago", added)
    conn.commit()
    done = await _scheduler(db_url, settings, datetime(2026, 6, 15, 22, tzinfo=UTC))
    assert len(done.sent) == 1 and len(done.missed) == 1
    [missed, next_kiri] = _events(conn, kiri)
    assert missed["status"] == "missed" and "local day 2026-06-15 had ended" in missed["failure_reason"]
    assert next_kiri["status"] == "pending" and next_kiri["local_due_at"] == datetime(2027, 6, 15, 9, 0)
    assert [e["status"] for e in _events(conn, pago)] == ["queued", "pending"]
    rows = conn.execute("SELECT recipient_email FROM mailroom.email_queue").fetchall()
    assert rows == [{"recipient_email": "pago@example.com"}]


async def test_racing_schedulers_send_each_due_event_once(db_url: str, settings: Settings) -> None:
    added = datetime(2026, 6, 1, tzinfo=UTC)
    with psycopg.connect(db_url) as wconn:
        wconn.execute("SELECT set_config('mailroom.now', %s, true)", (added.isoformat(),))
        wconn.execute(
            "INSERT INTO mailroom.people (email, first_name, last_name, date_of_birth, time_zone)"
            " SELECT 'p' || i || '@example.com', 'P' || i, 'Q', DATE '1990-06-15', (ARRAY%s)[1 + i %% 6]"
            " FROM generate_series(1, 600) i".replace("ARRAY%s", "%s::text[]"),
            (list(ZONES),),
        )
        wconn.commit()
    # 15 June 21:00 UTC: the day has ended in Kiritimati, Lord Howe and Kathmandu (missed), not in London,
    # New York and Pago Pago, where 09:00 has passed (sent).
    now = datetime(2026, 6, 15, 21, tzinfo=UTC)
    passes = await asyncio.gather(*(_drain(db_url, settings, now) for _ in range(4)))
    finished = [e for p in passes for e in p]
    assert len(finished) == 600 and len(set(finished)) == 600
    with psycopg.connect(db_url) as check:
        counts: dict[str, int] = dict(
            check.execute("SELECT status, count(*) FROM mailroom.events GROUP BY status").fetchall()
        )
        emails = check.execute("SELECT count(*) FROM mailroom.email_queue").fetchone()
    assert counts == {"pending": 600, "queued": 300, "missed": 300}
    assert emails == (300,)


async def _drain(db_url: str, settings: Settings, now: datetime) -> list[UUID]:
    finished: list[UUID] = []
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        while True:
            done = await run_scheduler(aconn, settings, now=now, limit=25)
            finished += done.sent + done.missed + done.failed
            if not done.handled:
                return finished


async def test_a_stalled_claim_returns_to_pending(db_url: str, conn: Conn, settings: Settings) -> None:
    person = _add(conn, settings, "Ada", date(1990, 6, 15), "Europe/London", datetime(2026, 6, 1, tzinfo=UTC))
    conn.commit()
    now = _pending(conn, person)["due_at"]
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        [claim] = await claim_due(aconn, now=now)  # ... and this scheduler dies
        done = await run_scheduler(aconn, replace(settings, lease_seconds=0), now=now)
    assert done.rescued == 1 and len(done.sent) == 1
    assert await _finish_late(db_url, claim, settings, now) == "stale"


async def _finish_late(db_url: str, claim: Claimed, settings: Settings, now: datetime) -> str:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        return await finish_event(aconn, claim, settings, now=now)


def test_set_based_pass_schedules_everyone_without_an_event(
    conn: Conn, settings: Settings, db_url: str
) -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    people = [_add(conn, settings, f"P{i}", date(1990, 1 + i, 10), ZONES[i], now) for i in range(6)]
    conn.execute("DELETE FROM mailroom.events")
    assert schedule_missing(conn, settings, now=now) == 6
    assert schedule_missing(conn, settings, now=now) == 0
    for i, person in enumerate(people):
        assert _pending(conn, person)["due_at"] == expected_due(date(1990, 1 + i, 10), ZONES[i], now)
    upcoming = upcoming_events(conn, now=now, hours=24 * 60)
    assert [u.person_id for u in upcoming] == [people[5]]  # only 10 June falls in the next 60 days
    # The same pass shared by several sessions, each taking a slice of the people.
    conn.execute("DELETE FROM mailroom.events")
    conn.commit()
    assert schedule_everyone(db_url, settings, now=now, sessions=3) == 6
    assert schedule_everyone(db_url, settings, now=now, sessions=3) == 0
    assert [_pending(conn, p)["due_at"] for p in people] == [
        expected_due(date(1990, 1 + i, 10), ZONES[i], now) for i in range(6)
    ]


async def test_birthday_email_arrives_end_to_end(
    db_url: str, conn: Conn, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    person = _add(
        conn, settings, "Ada", date(1990, 6, 15), "Australia/Lord_Howe", datetime(2026, 6, 1, tzinfo=UTC)
    )
    conn.commit()
    await _scheduler(db_url, settings, _pending(conn, person)["due_at"])
    assert await run_until_drained(db_url, settings) == 1
    [received] = smtp_sink.messages_to("ada@example.com")
    assert received.message["Subject"] == "Happy birthday, Ada!"
    assert received.message["To"] == "Ada Tester <ada@example.com>"
    [sent, _] = _events(conn, person)
    email = conn.execute(
        "SELECT sent_at FROM mailroom.email_queue WHERE id = %s", (sent["email_id"],)
    ).fetchone()
    assert email is not None and sent["status"] == "completed" and sent["executed_at"] == email["sent_at"]


async def test_birthday_producer_in_the_worker_sends_a_birthday_due_today(
    db_url: str, conn: Conn, settings: Settings, smtp_sink: RunningSink
) -> None:
    from worker.engine.delivery import Worker, WorkerOptions
    from worker.producers.birthdays import PRODUCER

    # The producer runs on the real clock: pick a zone where 09:00 has passed today and the day has not ended.
    now = datetime.now(UTC)
    zone = next(z for z in ZONES if 10 <= now.astimezone(ZoneInfo(z)).hour <= 22)
    today = now.astimezone(ZoneInfo(zone)).date()
    born = date(1990, today.month, today.day if (today.month, today.day) != (2, 29) else 28)
    add_sender(db_url, smtp_sink.port)
    person = _add(conn, settings, "Ada", born, zone, now)
    conn.commit()
    assert _pending(conn, person)["due_at"] < now  # due earlier today
    worker = Worker(db_url, settings, WorkerOptions(concurrency=1, poll_seconds=0.2), producers=[PRODUCER])
    task = asyncio.create_task(worker.run())
    try:
        assert await smtp_sink.wait_for(1, timeout=20)
    finally:
        worker.stop()
        await task
    assert smtp_sink.messages_to("ada@example.com")[0].message["Subject"] == "Happy birthday, Ada!"
    assert [e["status"] for e in _events(conn, person)] == ["completed", "pending"]


def _move(conn: Conn, people: list[UUID], zone: str, now: datetime) -> None:
    """Change the time zone of `people` in one statement (the trigger reschedules at `now`) and commit."""
    conn.execute("SELECT set_config('mailroom.now', %s, true)", (now.isoformat(),))
    conn.execute("UPDATE mailroom.people SET time_zone = %s WHERE id = ANY(%s)", (zone, people))
    conn.commit()


def _emails_by_key(conn: Conn) -> dict[str, int]:
    rows = conn.execute(
        "SELECT idempotency_key, count(*) AS n FROM mailroom.email_queue GROUP BY idempotency_key"
    ).fetchall()
    conn.commit()
    return {r["idempotency_key"]: r["n"] for r in rows}


async def _run_like_the_producer(db_url: str, settings: Settings, now: datetime) -> Any:
    """Call the scheduler again at once while it handled something, as the worker calls a producer."""
    total: dict[str, list[UUID]] = {"sent": [], "missed": [], "stale": []}
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        while (done := await run_scheduler(aconn, settings, now=now)).handled:
            for outcome in total:
                total[outcome] += getattr(done, outcome)
    return total


async def test_dropped_stale_completions_are_never_lost_the_rescheduled_events_go_out(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    added = datetime(2026, 6, 1, tzinfo=UTC)
    people = [_add(conn, settings, f"P{i}", date(1990, 6, 15), "Europe/London", added) for i in range(40)]
    conn.commit()
    at_nine_london = datetime(2026, 6, 15, 8, 30, tzinfo=UTC)  # 09:30 in London, 04:30 in New York
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        claims = await claim_due(aconn, now=at_nine_london)
        assert len(claims) == 40
        for claim in claims[:20]:
            assert await finish_event(aconn, claim, settings, now=at_nine_london) == "sent"
        # Everyone moves to New York while the other half is in this scheduler's hands.
        _move(conn, people, "America/New_York", at_nine_london)
        for claim in claims[20:]:
            assert await finish_event(aconn, claim, settings, now=at_nine_london) == "stale"
    late = {c.person_id for c in claims[20:]}
    # Dropped, not lost: each stale event stands pending at 09:00 New York time the same day ...
    for person in late:
        event = _pending(conn, person)
        assert (
            event["local_due_at"] == datetime(2026, 6, 15, 9, 0) and event["time_zone"] == "America/New_York"
        )
    conn.commit()
    assert (await _run_like_the_producer(db_url, settings, at_nine_london))["sent"] == []
    # ... and goes out when that comes: every person gets exactly one email for the day, none twice.
    done = await _run_like_the_producer(db_url, settings, datetime(2026, 6, 15, 13, 0, tzinfo=UTC))
    assert {e for e in done["sent"]} == {c.id for c in claims[20:]} and done["stale"] == []
    assert _emails_by_key(conn) == {f"birthday:{p}:2026-06-15": 1 for p in people}
    for person in people:
        assert [(e["status"], e["local_due_at"].date()) for e in _events(conn, person)] == [
            ("queued", date(2026, 6, 15)),
            ("pending", date(2027, 6, 15)),
        ]


async def test_racing_schedulers_and_zone_changes_lose_no_birthday_and_send_none_twice(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    added = datetime(2026, 6, 1, tzinfo=UTC)
    people = [_add(conn, settings, f"R{i}", date(1990, 6, 15), "Europe/London", added) for i in range(200)]
    conn.commit()
    now = datetime(2026, 6, 15, 8, 30, tzinfo=UTC)

    def move_everyone() -> None:
        # Zone changes in small transactions while the schedulers run: some land before a claim, some
        # between a claim and its completion (stale), some after it (next year's event moves).
        with psycopg.connect(db_url, row_factory=dict_row) as mover:
            for i in range(0, len(people), 5):
                _move(mover, people[i : i + 5], "America/New_York", now)

    moving = asyncio.to_thread(move_everyone)
    await asyncio.gather(moving, *(_drain(db_url, settings, now) for _ in range(3)))
    await asyncio.gather(
        *(_drain(db_url, settings, datetime(2026, 6, 15, 13, 0, tzinfo=UTC)) for _ in range(3))
    )
    assert _emails_by_key(conn) == {f"birthday:{p}:2026-06-15": 1 for p in people}
    rows = conn.execute("SELECT status, local_due_at::date AS day FROM mailroom.events").fetchall()
    statuses = Counter((r["status"], r["day"]) for r in rows)
    assert statuses == {("queued", date(2026, 6, 15)): 200, ("pending", date(2027, 6, 15)): 200}


async def test_a_zone_change_after_the_birthday_came_due_marks_it_missed_never_silently_dropped(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    added = datetime(2026, 6, 1, tzinfo=UTC)
    claimed = _add(conn, settings, "Claimed", date(1990, 6, 15), "Europe/London", added)
    overdue = _add(conn, settings, "Overdue", date(1990, 6, 15), "Europe/London", added)
    reborn = _add(conn, settings, "Reborn", date(1990, 6, 15), "Europe/London", added)
    conn.commit()
    noon = datetime(2026, 6, 15, 12, tzinfo=UTC)  # 13:00 in London; already 16 June 02:00 in Kiritimati
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        [claim] = [c for c in await claim_due(aconn, now=noon, limit=3) if c.person_id == claimed]
        # Both move where the birthday's local day has ended: by the catch-up rule it is missed, on record.
        _move(conn, [claimed, overdue], "Pacific/Kiritimati", noon)
        assert await finish_event(aconn, claim, settings, now=noon) == "stale"
    for person in (claimed, overdue):
        [missed, following] = _events(conn, person)
        assert missed["status"] == "missed" and missed["local_due_at"] == datetime(2026, 6, 15, 9, 0)
        assert "time zone changed to Pacific/Kiritimati" in missed["failure_reason"]
        assert "local day 2026-06-15 had ended" in missed["failure_reason"]
        assert following["status"] == "pending" and following["local_due_at"] == datetime(2027, 6, 15, 9, 0)
        assert following["time_zone"] == "Pacific/Kiritimati"
    # A date of birth corrected after the birthday came due: that day was not their birthday (cancelled,
    # on record); should the old date come back, the day is scheduled again.
    update_person(conn, reborn, {"date_of_birth": date(1990, 6, 20)}, settings=settings, now=noon)
    conn.commit()
    [cancelled, moved] = _events(conn, reborn)
    assert cancelled["status"] == "cancelled" and "date of birth changed" in cancelled["failure_reason"]
    assert moved["status"] == "pending" and moved["local_due_at"] == datetime(2026, 6, 20, 9, 0)
    update_person(conn, reborn, {"date_of_birth": date(1990, 6, 15)}, settings=settings, now=noon)
    conn.commit()
    assert _pending(conn, reborn)["local_due_at"] == datetime(2026, 6, 15, 9, 0)
    conn.commit()
    done = await _run_like_the_producer(db_url, settings, noon)
    assert len(done["sent"]) == 1 and _emails_by_key(conn) == {f"birthday:{reborn}:2026-06-15": 1}
