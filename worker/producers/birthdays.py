"""Birthday email in each person's time zone (reference 02): people, scheduling, and the due-event scheduler.

Every person has exactly one pending (or in-flight) birthday event: database triggers schedule it when the
person is inserted (one set-based statement per INSERT) and reschedule it when their time zone or date of
birth changes, in the same transaction. The rules (29 February, daylight-saving gaps and folds) live in the
SQL functions of migration 0002 (`mailroom.next_birthday`, `mailroom.local_instant`).

The scheduler claims due events with SKIP LOCKED (marking them processing and moving their version on),
then finishes each in its own transaction: the email is enqueued with the idempotency key
(person, event type, local date), the event is completed only if its version is still the claimed one, and
next year's event is scheduled. A stale completion (the person changed or was deleted meanwhile) rolls back
with its email: it is dropped, and the rescheduled event is sent at its new time instead (or, when the change
moved a birthday that had already come due to another day, that event stands closed as missed or cancelled,
with the reason: never silently gone). An event whose
person's local day has already ended when it is finished (the scheduler was down) is marked missed, never
sent a day late.
"""

from __future__ import annotations

import logging
import re
import time as clock
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.rows import dict_row, tuple_row

from worker.core.config import ConfigError, Settings
from worker.core.masking import mask_address
from worker.core.outbox import EmailRequest, enqueue_async
from worker.core.validation import ValidationError, check_header_text, normalise_address
from worker.engine.producer import Producer

log = logging.getLogger(__name__)

EVENT_TYPE = "birthday"
TEMPLATE = "birthday"
_LOCALE = re.compile(r"^[a-z]{2}(-[A-Z]{2})?$")
_TIME = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])(:([0-5][0-9]))?$")


@dataclass(frozen=True)
class Person:
    """One person whose birthday gets an email."""

    id: uuid.UUID
    email: str
    first_name: str
    last_name: str
    date_of_birth: date
    time_zone: str
    locale: str
    version: int


@dataclass(frozen=True)
class Upcoming:
    """A pending birthday event, as `mailroom events upcoming` lists it."""

    event_id: uuid.UUID
    person_id: uuid.UUID
    email: str
    first_name: str
    last_name: str
    due_at: datetime
    local_due_at: datetime
    time_zone: str
    version: int


@dataclass(frozen=True)
class Claimed:
    """An event this scheduler claimed: it may finish it only while the event is still at `version`."""

    id: uuid.UUID
    version: int
    person_id: uuid.UUID
    local_due_at: datetime
    time_zone: str
    idempotency_key: str

    @property
    def day(self) -> date:
        """The birthday's local date (the last part of the idempotency key)."""
        return date.fromisoformat(self.idempotency_key.rsplit(":", 1)[1])


@dataclass
class SchedulerPass:
    """What one scheduler pass did, event id by outcome."""

    sent: list[uuid.UUID] = field(default_factory=list)
    missed: list[uuid.UUID] = field(default_factory=list)
    failed: list[uuid.UUID] = field(default_factory=list)
    stale: list[uuid.UUID] = field(default_factory=list)
    rescued: int = 0

    @property
    def handled(self) -> int:
        """Claimed events finished one way or another, plus stalled claims returned to pending."""
        return len(self.sent) + len(self.missed) + len(self.failed) + len(self.stale) + self.rescued


class _Stale(Exception):
    """The claimed version is gone: roll back this event's transaction."""


def send_time(settings: Settings) -> time:
    """The configured local time of day for birthday email (`MAILROOM_BIRTHDAY_LOCAL_TIME`, HH:MM)."""
    match = _TIME.match(settings.birthday_local_time.strip())
    if not match:
        raise ConfigError(
            f"MAILROOM_BIRTHDAY_LOCAL_TIME must be a time of day like 09:00, got {settings.birthday_local_time!r}"
        )
    return time(int(match.group(1)), int(match.group(2)), int(match.group(4) or 0))


SET_CLOCK = "SELECT set_config('mailroom.now', %s, true), set_config('mailroom.birthday_time', %s, true)"


def _clock_args(settings: Settings, now: datetime | None) -> tuple[str, str]:
    return (now.isoformat() if now is not None else "", send_time(settings).isoformat())


@contextmanager
def _atomic(conn: psycopg.Connection[Any]) -> Iterator[None]:
    # The caller's transaction; on an autocommit connection, one of our own (the clock is transaction-local).
    if conn.autocommit:
        with conn.transaction():
            yield
    else:
        yield


# ---------------------------------------------------------------------------
# People
# ---------------------------------------------------------------------------

INSERT_PERSON = """
INSERT INTO mailroom.people (email, first_name, last_name, date_of_birth, time_zone, locale)
VALUES (%(email)s, %(first_name)s, %(last_name)s, %(date_of_birth)s, %(time_zone)s, %(locale)s)
RETURNING id
"""
IS_TIME_ZONE = "SELECT mailroom.is_time_zone(%s)"
PERSON_COLUMNS = "id, email, first_name, last_name, date_of_birth, time_zone, locale, version"
SELECT_PERSON = (
    "SELECT id, email, first_name, last_name, date_of_birth, time_zone, locale, version"
    " FROM mailroom.people WHERE id = %s"
)
SELECT_PEOPLE = (
    "SELECT id, email, first_name, last_name, date_of_birth, time_zone, locale, version"
    " FROM mailroom.people ORDER BY last_name, first_name, id LIMIT %s"
)
DELETE_PERSON = "DELETE FROM mailroom.people WHERE id = %s RETURNING id"
_EDITABLE = ("email", "first_name", "last_name", "date_of_birth", "time_zone", "locale")


def _check_name(field_name: str, value: str) -> str:
    value = value.strip()
    if not 1 <= len(value) <= 100:
        raise ValidationError(field_name, "must be 1 to 100 characters")
    return check_header_text(field_name, value)  # names end up in the subject line


def _check_fields(conn: psycopg.Connection[Any], fields: dict[str, Any]) -> dict[str, Any]:
    checked = dict(fields)
    if "email" in fields:
        checked["email"] = normalise_address("email", fields["email"])
    for name in ("first_name", "last_name"):
        if name in fields:
            checked[name] = _check_name(name, fields[name])
    if "date_of_birth" in fields:
        born = fields["date_of_birth"]
        if not isinstance(born, date):
            raise ValidationError("date_of_birth", "must be a date like 1990-05-17")
        if born >= datetime.now(UTC).date() or born <= date(1900, 1, 1):
            raise ValidationError("date_of_birth", f"{born} must be in the past (and after 1900-01-01)")
    if "time_zone" in fields:
        zone = str(fields["time_zone"]).strip()
        row = conn.execute(IS_TIME_ZONE, (zone,)).fetchone()
        if not row or not _first(row):
            raise ValidationError(
                "time_zone", f"unknown time zone {zone!r}: use an IANA name such as Europe/London"
            )
        checked["time_zone"] = zone
    if "locale" in fields and not _LOCALE.match(str(fields["locale"])):
        raise ValidationError("locale", f"{fields['locale']!r} is not a locale like 'en' or 'fr-CA'")
    return checked


def _first(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def _email_taken(exc: errors.UniqueViolation) -> ValidationError:
    return ValidationError("email", "a person with this email address already exists")


def add_person(
    conn: psycopg.Connection[Any],
    *,
    email: str,
    first_name: str,
    last_name: str,
    date_of_birth: date,
    time_zone: str,
    locale: str = "en",
    settings: Settings,
    now: datetime | None = None,
) -> uuid.UUID:
    """Add a person in the caller's transaction; their next birthday event is scheduled with them."""
    fields = _check_fields(
        conn,
        {
            "email": email,
            "first_name": first_name,
            "last_name": last_name,
            "date_of_birth": date_of_birth,
            "time_zone": time_zone,
            "locale": locale,
        },
    )
    with _atomic(conn), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(SET_CLOCK, _clock_args(settings, now))
        try:
            with conn.transaction():
                row = cur.execute(INSERT_PERSON, fields).fetchone()
        except errors.UniqueViolation as exc:
            raise _email_taken(exc) from None
    assert row is not None
    return uuid.UUID(str(row[0]))


def get_person(conn: psycopg.Connection[Any], person_id: uuid.UUID) -> Person | None:
    """One person, or None."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SELECT_PERSON, (person_id,)).fetchone()
    return Person(**row) if row else None


def list_people(conn: psycopg.Connection[Any], limit: int = 1000) -> list[Person]:
    """People by name."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [Person(**row) for row in cur.execute(SELECT_PEOPLE, (limit,)).fetchall()]


def update_person(
    conn: psycopg.Connection[Any],
    person_id: uuid.UUID,
    changes: dict[str, Any],
    *,
    settings: Settings,
    expected_version: int | None = None,
    now: datetime | None = None,
) -> Person:
    """Change a person in the caller's transaction; a new time zone or date of birth reschedules their event.

    With `expected_version`, the change applies only if nobody changed the person since (optimistic
    locking); otherwise it is refused with a clear error and nothing changes.
    """
    unknown = set(changes) - set(_EDITABLE)
    if unknown:
        raise ValidationError(sorted(unknown)[0], f"cannot be changed; editable: {', '.join(_EDITABLE)}")
    if not changes:
        raise ValidationError("person", "nothing to change")
    fields = _check_fields(conn, changes)
    statement = sql.SQL(
        "UPDATE mailroom.people SET {sets} WHERE id = %(id)s"
        " AND (%(version)s::integer IS NULL OR version = %(version)s) RETURNING {columns}"
    ).format(
        sets=sql.SQL(", ").join(
            sql.SQL("{} = {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in fields
        ),
        columns=sql.SQL(PERSON_COLUMNS),
    )
    with _atomic(conn), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(SET_CLOCK, _clock_args(settings, now))
        try:
            with conn.transaction():
                row = cur.execute(
                    statement, {**fields, "id": person_id, "version": expected_version}
                ).fetchone()
        except errors.UniqueViolation as exc:
            raise _email_taken(exc) from None
        if row is None:
            current = cur.execute(SELECT_PERSON, (person_id,)).fetchone()
            if current is None:
                raise ValidationError("person", f"no person {person_id}")
            raise ValidationError(
                "version",
                f"person {person_id} is at version {current['version']}, not {expected_version}:"
                " someone changed it; read it again and retry",
            )
    return Person(**row)


def delete_person(conn: psycopg.Connection[Any], person_id: uuid.UUID) -> bool:
    """Delete a person and (by cascade) their events; False when there was no such person."""
    with conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute(DELETE_PERSON, (person_id,)).fetchone() is not None


# ---------------------------------------------------------------------------
# Scheduling
# ---------------------------------------------------------------------------

SCHEDULE = "SELECT mailroom.schedule_birthdays(%(ids)s::uuid[], %(now)s, %(time)s)"

UPCOMING = """
SELECT e.id AS event_id, e.person_id, p.email, p.first_name, p.last_name, e.due_at, e.local_due_at,
       e.time_zone, e.version
FROM mailroom.events e JOIN mailroom.people p ON p.id = e.person_id
WHERE e.status = 'pending' AND e.due_at <= %(until)s
ORDER BY e.due_at, e.id
LIMIT %(limit)s
"""


def schedule_missing(
    conn: psycopg.Connection[Any],
    settings: Settings,
    *,
    now: datetime | None = None,
    person_ids: list[uuid.UUID] | None = None,
) -> int:
    """The set-based pass: schedule the next birthday of everyone (or `person_ids`) who has none pending."""
    args = {"ids": person_ids, "now": now or datetime.now(UTC), "time": send_time(settings)}
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(SCHEDULE, args).fetchone()
    return int(row[0]) if row else 0


SCHEDULE_PART = "SELECT mailroom.schedule_birthdays(NULL, %(now)s, %(time)s, %(part)s, %(parts)s)"


def schedule_everyone(url: str, settings: Settings, *, now: datetime | None = None, sessions: int = 2) -> int:
    """The set-based pass over everyone, shared by `sessions` database sessions (each takes a slice of ids).

    For large catch-ups (a bulk load with the triggers off, a restore): on a multi-core server the slices
    run side by side. Each slice commits on its own; running it again schedules only what is missing.
    """
    from concurrent.futures import ThreadPoolExecutor

    args = {"now": now or datetime.now(UTC), "time": send_time(settings), "parts": sessions}

    def one(part: int) -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(SCHEDULE_PART, {**args, "part": part}).fetchone()
        return int(row[0]) if row else 0

    with ThreadPoolExecutor(max_workers=sessions) as pool:
        return sum(pool.map(one, range(sessions)))


async def schedule_missing_async(
    conn: psycopg.AsyncConnection[Any], settings: Settings, *, now: datetime | None = None
) -> int:
    """Async twin of `schedule_missing` for everyone (the producer's safety net)."""
    args = {"ids": None, "now": now or datetime.now(UTC), "time": send_time(settings)}
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(SCHEDULE, args)
        row = await cur.fetchone()
    return int(row[0]) if row else 0


def upcoming_events(
    conn: psycopg.Connection[Any], *, now: datetime | None = None, hours: float = 24.0, limit: int = 1000
) -> list[Upcoming]:
    """Pending birthday events due within `hours` (overdue ones first)."""
    until = (now or datetime.now(UTC)) + timedelta(hours=hours)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(UPCOMING, {"until": until, "limit": limit}).fetchall()
    return [Upcoming(**row) for row in rows]


# ---------------------------------------------------------------------------
# The scheduler: claim, finish, catch up
# ---------------------------------------------------------------------------

# ANY(ARRAY(...)): the update finds the claimed rows by primary key, never by a join over the table.
CLAIM = """
UPDATE mailroom.events e SET status = 'processing', version = e.version + 1
WHERE e.id = ANY (ARRAY(SELECT id FROM mailroom.events
                        WHERE status = 'pending' AND due_at <= %(now)s
                        ORDER BY due_at
                        LIMIT %(limit)s
                        FOR UPDATE SKIP LOCKED))
RETURNING e.id, e.version, e.person_id, e.local_due_at, e.time_zone, e.idempotency_key
"""

# A scheduler that died between claim and finish leaves its events processing: back to pending (the
# version moves on, so a late finish of the dead scheduler is stale).
RESCUE = """
UPDATE mailroom.events e SET status = 'pending', version = e.version + 1
WHERE e.id = ANY (ARRAY(SELECT id FROM mailroom.events
                        WHERE status = 'processing' AND updated_at < now() - make_interval(secs => %s)
                        FOR UPDATE SKIP LOCKED))
RETURNING e.id
"""

# Locked first, in the same order as a person's update (person, then event): the two serialise.
LOCK_PERSON = """
SELECT p.id, p.email, p.first_name, p.last_name, p.locale,
       (%(now)s::timestamptz AT TIME ZONE %(zone)s)::date AS local_today
FROM mailroom.people p WHERE p.id = %(person)s
FOR NO KEY UPDATE
"""

FINISH = """
UPDATE mailroom.events
SET status = %(status)s, version = version + 1,
    executed_at = CASE WHEN %(status)s::text = 'completed' THEN %(now)s::timestamptz END,
    email_id = %(email_id)s, failure_reason = %(reason)s
WHERE id = %(id)s AND version = %(version)s AND status = 'processing'
"""


async def claim_due(conn: psycopg.AsyncConnection[Any], *, now: datetime, limit: int = 100) -> list[Claimed]:
    """Claim up to `limit` due events (SKIP LOCKED: concurrent schedulers take disjoint sets)."""
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(CLAIM, {"now": now, "limit": limit})
        rows = await cur.fetchall()
    return [Claimed(**row) for row in rows]


async def rescue_stalled(conn: psycopg.AsyncConnection[Any], lease_seconds: float) -> int:
    """Return events claimed longer than `lease_seconds` ago (their scheduler died) to pending."""
    async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(RESCUE, (lease_seconds,))
        return len(await cur.fetchall())


async def finish_event(
    conn: psycopg.AsyncConnection[Any], event: Claimed, settings: Settings, *, now: datetime
) -> str:
    """Finish one claimed event in its own transaction; return 'sent', 'missed', 'failed' or 'stale'."""
    try:
        async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SET_CLOCK, _clock_args(settings, now))
            await cur.execute(LOCK_PERSON, {"now": now, "zone": event.time_zone, "person": event.person_id})
            person = await cur.fetchone()
            if person is None:
                raise _Stale  # deleted: the cascade removed the event too
            status, outcome, email_id, reason = "completed", "sent", None, None
            if person["local_today"] > event.day:
                status = outcome = "missed"
                reason = f"came due while no scheduler ran; the local day {event.day} had ended"
            else:
                try:
                    email_id = await enqueue_async(
                        conn, birthday_email(person, event), settings=settings, created_by="birthdays"
                    )
                except ValidationError as exc:
                    status = outcome = "failed"
                    reason = f"cannot be mailed: {exc}"
            args = {"status": status, "now": now, "email_id": email_id, "reason": reason}
            await cur.execute(FINISH, {**args, "id": event.id, "version": event.version})
            if cur.rowcount != 1:
                raise _Stale  # rolls back the email with the completion
            await cur.execute(SCHEDULE, {"ids": [event.person_id], "now": now, "time": send_time(settings)})
    except _Stale:
        log.info(
            "birthday event %s changed since it was claimed; dropped (rescheduled, or closed with a reason)",
            event.id,
        )
        return "stale"
    if outcome != "sent":
        log.info("birthday event %s for %s %s: %s", event.id, mask_address(person["email"]), outcome, reason)
    return outcome


def birthday_email(person: dict[str, Any], event: Claimed) -> EmailRequest:
    """The birthday email of one event; its idempotency key is (person, event type, local date)."""
    return EmailRequest(
        to=person["email"],
        to_name=f"{person['first_name']} {person['last_name']}",
        template=TEMPLATE,
        locale=person["locale"],
        data={"first_name": person["first_name"], "last_name": person["last_name"]},
        idempotency_key=f"{EVENT_TYPE}:{event.person_id}:{event.day.isoformat()}",
        transactional=False,
        reference_type="event",
        reference_id=str(event.id),
    )


async def run_scheduler(
    conn: psycopg.AsyncConnection[Any],
    settings: Settings,
    *,
    now: datetime | None = None,
    limit: int = 100,
) -> SchedulerPass:
    """One pass: return stalled claims, claim due events, finish each (send, or mark missed)."""
    now = now or datetime.now(UTC)
    done = SchedulerPass(rescued=await rescue_stalled(conn, settings.lease_seconds))
    for event in await claim_due(conn, now=now, limit=limit):
        outcome = await finish_event(conn, event, settings, now=now)
        getattr(done, outcome).append(event.id)
    return done


# --- the producer inside `mailroom worker` ---------------------------------------------

# Triggers keep every person scheduled; the full set-based pass is only a safety net, run when this
# process starts and then hourly (it reads every person, so not on each wake-up).
REPAIR_EVERY_SECONDS = 3600.0
_last_repair: float | None = None


async def run_once(conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
    """Finish one batch of due birthday events (and, now and then, schedule anyone left unscheduled)."""
    global _last_repair
    handled = (await run_scheduler(conn, settings)).handled
    if _last_repair is None or clock.monotonic() - _last_repair >= REPAIR_EVERY_SECONDS:
        _last_repair = clock.monotonic()
        handled += await schedule_missing_async(conn, settings)
    return handled


# Due times are minutes apart at most for a zone, so a 15-second look suffices; people changes wake it.
PRODUCER = Producer("birthdays", run_once, channels=("mailroom_events",), interval_seconds=15.0)
