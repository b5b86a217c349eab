"""People with birthdays and what their events share: validation, add, update, list, delete."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.rows import dict_row, tuple_row

from worker.core.config import ConfigError, Settings
from worker.core.validation import ValidationError, check_header_text, normalise_address

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
    retry_count: int = 0  # failed attempts to render or enqueue its email so far
    retry_at: datetime | None = None  # not tried again before this (backoff)
    failure_reason: str | None = None  # the last failed attempt's error


@dataclass(frozen=True)
class Claimed:
    """An event this scheduler claimed: it may finish it only while the event is still at `version`."""

    id: uuid.UUID
    version: int
    person_id: uuid.UUID
    local_due_at: datetime
    time_zone: str
    idempotency_key: str
    retry_count: int = 0
    failure_reason: str | None = None  # the last failed attempt's error, while retrying

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
    retried: list[uuid.UUID] = field(default_factory=list)  # pending again after a backoff
    rescued: int = 0

    @property
    def handled(self) -> int:
        """Claimed events finished one way or another, plus stalled claims returned to pending."""
        done = len(self.sent) + len(self.missed) + len(self.failed) + len(self.stale) + len(self.retried)
        return done + self.rescued


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
