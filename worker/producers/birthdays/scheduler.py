"""Scheduling birthday events and the due-event scheduler (claim, finish, catch up); the worker's producer."""

from __future__ import annotations

import logging
import time as clock
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row, tuple_row

from worker.core.config import Settings
from worker.core.failover import database_unavailable
from worker.core.masking import mask_address
from worker.engine.producer import Producer
from worker.producers.birthdays.people import (
    EVENT_TYPE,
    SET_CLOCK,
    TEMPLATE,
    Claimed,
    SchedulerPass,
    Upcoming,
    _clock_args,
    _Stale,
    send_time,
)

# Enqueueing (templates, links, content rules) is loaded with the first email this producer makes: a
# round that finds nothing to do, what most rounds find, starts without it.
if TYPE_CHECKING:
    from worker.core.outbox import EmailRequest

log = logging.getLogger(__name__)
# ---------------------------------------------------------------------------
# Scheduling
# ---------------------------------------------------------------------------

SCHEDULE = "SELECT mailroom.schedule_birthdays(%(ids)s::uuid[], %(now)s, %(time)s)"

UPCOMING = """
SELECT e.id AS event_id, e.person_id, p.email, p.first_name, p.last_name, e.due_at, e.local_due_at,
       e.time_zone, e.version, e.retry_count, e.retry_at, e.failure_reason
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
# An event whose last attempt failed waits out its backoff (retry_at) too.
CLAIM = """
UPDATE mailroom.events e SET status = 'processing', version = e.version + 1, retry_at = NULL
WHERE e.id = ANY (ARRAY(SELECT id FROM mailroom.events
                        WHERE status = 'pending' AND due_at <= %(now)s
                          AND (retry_at IS NULL OR retry_at <= %(now)s)
                        ORDER BY due_at
                        LIMIT %(limit)s
                        FOR UPDATE SKIP LOCKED))
RETURNING e.id, e.version, e.person_id, e.local_due_at, e.time_zone, e.idempotency_key, e.retry_count,
          e.failure_reason
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

# Locked first, in the same order as a person's update (person, then event): the two serialise. The
# payload is read after the lock: a rename committed meanwhile is what goes out.
LOCK_PERSON = """
SELECT p.id, p.email, p.first_name, p.last_name, p.locale,
       (%(now)s::timestamptz AT TIME ZONE %(zone)s)::date AS local_today,
       (SELECT e.delivery_payload FROM mailroom.events e WHERE e.id = %(event)s) AS payload
FROM mailroom.people p WHERE p.id = %(person)s
FOR NO KEY UPDATE
"""

# queued: the email is handed over, and the event follows it from here (a trigger on the email's
# status; one already sent, failed or suppressed is taken at once by the event's own trigger).
FINISH = """
UPDATE mailroom.events
SET status = %(status)s, version = version + 1, executed_at = NULL,
    email_id = %(email_id)s, failure_reason = %(reason)s
WHERE id = %(id)s AND version = %(version)s AND status = 'processing'
RETURNING status
"""

# A failed attempt to render or enqueue: pending again after the backoff, one retry more.
RETRY = """
UPDATE mailroom.events
SET status = 'pending', version = version + 1, retry_count = retry_count + 1,
    retry_at = %(now)s::timestamptz + make_interval(secs => %(backoff)s), failure_reason = %(reason)s
WHERE id = %(id)s AND version = %(version)s AND status = 'processing'
"""

# Seconds before the 1st, 2nd and 3rd retry of an event whose email could not be rendered or
# enqueued; the 4th failure fails the event (retry_count stays within 0..3, as reference 02 has it).
RETRY_BACKOFF_SECONDS = (60.0, 300.0, 1800.0)
MAX_RETRIES = len(RETRY_BACKOFF_SECONDS)


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
    """Finish one claimed event in its own transaction; return 'sent' (its email is enqueued), 'retried'
    (rendering or enqueueing failed: pending again after a backoff), 'missed', 'failed' or 'stale'."""
    try:
        async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SET_CLOCK, _clock_args(settings, now))
            await cur.execute(
                LOCK_PERSON,
                {"now": now, "zone": event.time_zone, "person": event.person_id, "event": event.id},
            )
            person = await cur.fetchone()
            if person is None or person["payload"] is None:
                raise _Stale  # deleted: the cascade removed the event too
            status, outcome, email_id, reason = "queued", "sent", None, None
            if person["local_today"] > event.day:
                status = outcome = "missed"
                reason = _missed_reason(event)
            else:
                email_id, error = await _enqueue(conn, person, event, settings)
                if error is not None and event.retry_count < MAX_RETRIES:
                    await _retry(cur, event, now, error)
                    outcome = "retried"
                elif error is not None:
                    status = outcome = "failed"
                    reason = f"{error} (after {event.retry_count} retries)"
            if outcome != "retried":
                args = {"status": status, "now": now, "email_id": email_id, "reason": reason}
                await cur.execute(FINISH, {**args, "id": event.id, "version": event.version})
                finished = await cur.fetchone()
                if finished is None:
                    raise _Stale  # rolls back the email with the completion
                if finished["status"] == "failed" and outcome == "sent":
                    outcome = "failed"  # its email was already failed or suppressed (see FINISH)
                    reason = "its email already had an outcome (see `mailroom show` of the email)"
                await cur.execute(
                    SCHEDULE, {"ids": [event.person_id], "now": now, "time": send_time(settings)}
                )
    except _Stale:
        log.info(
            "birthday event %s changed since it was claimed; dropped (rescheduled, or closed with a reason)",
            event.id,
        )
        return "stale"
    if outcome in ("missed", "failed"):
        log.info("birthday event %s for %s %s: %s", event.id, mask_address(person["email"]), outcome, reason)
    return outcome


def _missed_reason(event: Claimed) -> str:
    """Why an event whose local day ended is missed (with its last attempt's error, if it had one)."""
    reason = f"came due while no scheduler ran; the local day {event.day} had ended"
    if event.retry_count and event.failure_reason:
        reason = f"the local day {event.day} ended before a retry succeeded; the last attempt: {event.failure_reason}"
    return reason


async def _enqueue(
    conn: psycopg.AsyncConnection[Any], person: dict[str, Any], event: Claimed, settings: Settings
) -> tuple[int | None, str | None]:
    """Enqueue the event's email in a savepoint: its id, or why it could not be rendered or enqueued.

    A refusal by the database (its content rules) rolls back only the savepoint, so the event's own
    bookkeeping still commits.
    """
    from worker.core.outbox import enqueue_async
    from worker.core.validation import ValidationError

    try:
        async with conn.transaction():
            request = birthday_email(person, event)
            return await enqueue_async(conn, request, settings=settings, created_by="birthdays"), None
    except ValidationError as exc:
        return None, f"cannot be rendered or enqueued: {exc}"
    except psycopg.DatabaseError as exc:
        if database_unavailable(exc):
            raise  # the database is gone or read-only: the claim is rescued later, nothing charged to the event
        return None, f"the database refused its email: {exc.diag.message_primary or exc}"


async def _retry(cur: psycopg.AsyncCursor[dict[str, Any]], event: Claimed, now: datetime, error: str) -> None:
    """Return the event to pending after its backoff, one retry more (stale if it changed meanwhile)."""
    backoff = RETRY_BACKOFF_SECONDS[event.retry_count]
    args = {"id": event.id, "version": event.version, "now": now, "backoff": backoff, "reason": error}
    await cur.execute(RETRY, args)
    if cur.rowcount != 1:
        raise _Stale
    log.warning(
        "birthday event %s: %s; retry %d of %d in %.0f s",
        event.id,
        error,
        event.retry_count + 1,
        MAX_RETRIES,
        backoff,
    )


def birthday_email(person: dict[str, Any], event: Claimed) -> EmailRequest:
    """The birthday email of one event, from its delivery_payload (template, locale, data) to the
    person's address; its idempotency key is (person, event type, local date)."""
    payload = person.get("payload") or {}
    data = payload.get("data")
    from worker.core.outbox import EmailRequest

    return EmailRequest(
        to=person["email"],
        to_name=f"{person['first_name']} {person['last_name']}",
        template=str(payload.get("template") or TEMPLATE),
        locale=payload.get("locale") or person["locale"],
        data=data if isinstance(data, dict) else {},
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
