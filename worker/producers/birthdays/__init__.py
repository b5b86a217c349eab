"""Birthday email in each person's time zone (reference 02): people, scheduling, and the due-event scheduler.

Every person has exactly one pending (or in-flight) birthday event: database triggers schedule it when the
person is inserted (one set-based statement per INSERT) and reschedule it when their time zone or date of
birth changes, in the same transaction. The rules (29 February, daylight-saving gaps and folds) live in the
SQL functions of migration 0002 (`mailroom.next_birthday`, `mailroom.local_instant`).

The scheduler claims due events with SKIP LOCKED (marking them processing and moving their version on),
then finishes each in its own transaction: the email the event records (`delivery_payload`: template,
locale, data) is enqueued with the idempotency key (person, event type, local date), the event is handed
over (queued) only if its version is still the claimed one, and next year's event is scheduled. From
there the event follows its email in the database, whichever worker records the outcome: completed when
the relay accepts it, failed with the reason when it fails for good, expires, bounces or is suppressed.
An email that cannot be rendered or enqueued puts the event back to pending after a backoff (1, 5, 30
minutes; `retry_count` 0 to 3), then fails it with the reason. A stale completion (the person changed or was deleted meanwhile) rolls back
with its email: it is dropped, and the rescheduled event is sent at its new time instead (or, when the change
moved a birthday that had already come due to another day, that event stands closed as missed or cancelled,
with the reason: never silently gone). An event whose
person's local day has already ended when it is finished (the scheduler was down) is marked missed, never
sent a day late.
"""

from worker.producers.birthdays.outcomes import OUTCOME_FILTERS, Outcome, event_outcomes
from worker.producers.birthdays.people import (
    EVENT_TYPE,
    Claimed,
    Person,
    SchedulerPass,
    Upcoming,
    add_person,
    delete_person,
    get_person,
    list_people,
    send_time,
    update_person,
)
from worker.producers.birthdays.scheduler import (
    PRODUCER,
    birthday_email,
    claim_due,
    finish_event,
    rescue_stalled,
    run_scheduler,
    schedule_everyone,
    schedule_missing,
    schedule_missing_async,
    upcoming_events,
)

__all__ = [
    "EVENT_TYPE",
    "OUTCOME_FILTERS",
    "PRODUCER",
    "Claimed",
    "Outcome",
    "Person",
    "SchedulerPass",
    "Upcoming",
    "add_person",
    "birthday_email",
    "claim_due",
    "delete_person",
    "event_outcomes",
    "finish_event",
    "get_person",
    "list_people",
    "rescue_stalled",
    "run_scheduler",
    "schedule_everyone",
    "schedule_missing",
    "schedule_missing_async",
    "send_time",
    "upcoming_events",
    "update_person",
]
