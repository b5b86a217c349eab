"""`mailroom people add|update|list|delete` and `mailroom events upcoming`: birthday email recipients."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, date
from typing import Any

import click

from worker.cli.framework import Command, Database, Group, json_option, number_option, with_database

# The states `events list --status` takes (kept here: `--help` must not import the producers).
OUTCOME_FILTERS = ("queued", "failed", "missed", "retrying")
MAX_HOURS = 24 * 366 * 10  # events upcoming looks at most ten years ahead

DESCRIPTION = """\
People whose birthday gets an email at MAILROOM_BIRTHDAY_LOCAL_TIME (default 09:00) in their own
time zone (an IANA name such as Europe/London). Adding a person schedules their next birthday;
changing their time zone or date of birth reschedules it. A person born on 29 February is greeted on
28 February in common years. A local time skipped by a daylight-saving jump is read with the offset
before the jump (02:30 becomes 03:30); one that happens twice is the second (standard-time) one. The
worker sends due birthdays; after downtime, a birthday whose local day has not ended is still sent,
one whose day has ended is marked missed.

Examples:
  mailroom people add ada@example.com Ada Lovelace --born 1990-12-10 --tz Europe/London
  mailroom people list
  mailroom events upcoming --hours 48"""

ADD = """\
Add a person and schedule their next birthday email at MAILROOM_BIRTHDAY_LOCAL_TIME in their time
zone; the time of that email is printed in local time and UTC. Other people are left alone.
Exit status 0, 2 when the address, date or time zone is invalid.

Example:
  mailroom people add ada@example.com Ada Lovelace --born 1990-12-10 --tz Europe/London --locale en"""

UPDATE = """\
Change only the fields given. A new time zone or date of birth reschedules the pending birthday
event; other changes leave it as it is. With --version (from `people list`) the change applies only
if nobody changed the person since. Exit status 0, 2 when the person is unknown, a value is invalid
or the version is stale.

Examples:
  mailroom people update 0b7e...c1 --tz America/New_York
  mailroom people update 0b7e...c1 --email ada@new.example.com --version 3"""

LIST = """\
List people with their id, name, date of birth, time zone and version. Changes nothing.
The count goes to standard error. Exit status 0.

Examples:
  mailroom people list --limit 50
  mailroom people list --json | jq -r '.[].email'"""

DELETE = """\
Delete a person and their birthday events. Emails already enqueued for them are left alone (cancel
them with `mailroom cancel`). Exit status 0, 2 when there is no such person.

Example:
  mailroom people delete 0b7e...c1"""

EVENTS = """\
Scheduled birthday events. `upcoming` lists pending events due within --hours (overdue ones first),
with their UTC and local times; `list` shows what became of them: queued (the email is waiting to be
sent), completed (the relay accepted it), failed with the reason (the email failed, expired,
bounced or was suppressed, or could not be rendered after 3 retries), missed, or retrying. Changes
nothing.

Examples:
  mailroom events upcoming
  mailroom events upcoming --hours 168 --json
  mailroom events list --status failed"""

UPCOMING = """\
List pending birthday events due within --hours (default 24), overdue ones first, with their UTC
and local times, time zone, name, retries so far (an event whose email could not be rendered or
enqueued is tried again after 1, 5 and 30 minutes) and event id. Changes nothing. The count goes to
standard error. Exit status 0.

Examples:
  mailroom events upcoming
  mailroom events upcoming --hours 168 --json"""


OUTCOMES = """\
List birthday events by what became of them, newest change first: queued (handed to the queue, not
yet sent), failed (with the reason: the email failed for good, expired, bounced or was suppressed,
or it could not be rendered or enqueued after 3 retries), missed (its local day ended first) and
retrying (pending again after a failed attempt, with the attempt's error and when it is tried
next). --status keeps one of them; --person shows every event of one person, completed ones
included. Names and reasons are printed with control characters made visible. Changes nothing. The
count goes to standard error. Exit status 0, 2 when an option is invalid.

Examples:
  mailroom events list
  mailroom events list --status failed --limit 20
  mailroom events list --person 0b7e...c1 --json"""


class IsoDate(click.ParamType[date, Any]):
    """A date like 1990-05-17."""

    name = "YYYY-MM-DD"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> date:
        if isinstance(value, date):
            return value
        try:
            return date.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a date like 1990-05-17", param, ctx)


class Hours(click.ParamType[float, Any]):
    """A number of hours above 0 and up to `MAX_HOURS`."""

    name = "H"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            hours = float(value)
        except ValueError:
            hours = math.nan
        if not 0 < hours <= MAX_HOURS:  # NaN fails too
            self.fail(f"{value!r} is not a number of hours above 0 and up to {MAX_HOURS}", param, ctx)
        return hours


class PersonId(click.ParamType[uuid.UUID, Any]):
    """A person's id: a UUID."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> uuid.UUID:
        if isinstance(value, uuid.UUID):
            return value
        try:
            return uuid.UUID(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a person id (a UUID)", param, ctx)


DATE, PERSON = IsoDate(), PersonId()


@click.group(cls=Group, help=DESCRIPTION)
def people() -> None:
    """`mailroom people ACTION`."""


@people.command("add", cls=Command, help=ADD, short_help="add a person (their next birthday is scheduled)")
@click.argument("email")
@click.argument("first_name", metavar="FIRST")
@click.argument("last_name", metavar="LAST")
@click.option("--born", type=DATE, required=True, metavar="YYYY-MM-DD", help="date of birth")
@click.option("--tz", required=True, metavar="ZONE", help="IANA time zone, e.g. Asia/Kathmandu")
@click.option("--locale", default="en", help="language of the email (default en)")
@with_database
def add(db: Database, email: str, first_name: str, last_name: str, born: date, tz: str, locale: str) -> int:
    """`mailroom people add EMAIL FIRST LAST --born DATE --tz ZONE [--locale L]`."""
    from worker.core.db import connect
    from worker.producers import birthdays

    with connect(db.url) as conn:
        person_id = birthdays.add_person(
            conn,
            email=email,
            first_name=first_name,
            last_name=last_name,
            date_of_birth=born,
            time_zone=tz,
            locale=locale,
            settings=db.settings,
        )
        _print_next(conn, person_id)
    return 0


@people.command(
    "update",
    cls=Command,
    help=UPDATE,
    short_help="change a person (zone or birth date changes reschedule)",
)
@click.argument("person_id", type=PERSON, metavar="ID")
@click.option("--email")
@click.option("--first-name")
@click.option("--last-name")
@click.option("--born", type=DATE, metavar="YYYY-MM-DD")
@click.option("--tz", metavar="ZONE")
@click.option("--locale")
@click.option("--version", type=int, help="apply only if the person is still at this version (from list)")
@with_database
def update(
    db: Database,
    person_id: uuid.UUID,
    email: str | None,
    first_name: str | None,
    last_name: str | None,
    born: date | None,
    tz: str | None,
    locale: str | None,
    version: int | None,
) -> int:
    """`mailroom people update ID [--email ...] [--version N]`: only the fields given change."""
    from worker.core.db import connect
    from worker.producers import birthdays

    given = (
        ("email", email),
        ("first_name", first_name),
        ("last_name", last_name),
        ("date_of_birth", born),
        ("time_zone", tz),
        ("locale", locale),
    )
    changes = {key: value for key, value in given if value is not None}
    with connect(db.url) as conn:
        person = birthdays.update_person(
            conn, person_id, changes, settings=db.settings, expected_version=version
        )
        click.echo(f"updated {person.id} (version {person.version})")
        _print_next(conn, person.id)
    return 0


@people.command("list", cls=Command, help=LIST, short_help="list people")
@number_option("--limit", default=1000, help="at most this many (default 1000)")
@json_option
@with_database
def list_people(db: Database, limit: int, as_json: bool) -> int:
    """`mailroom people list [--limit N] [--json]`."""
    from worker.core.db import connect
    from worker.core.terminal import printable
    from worker.producers import birthdays

    with connect(db.url) as conn:
        found = birthdays.list_people(conn, limit)
    if as_json:
        click.echo(json.dumps([_jsonable(vars(p)) for p in found], indent=2))
        return 0
    click.echo(f"{'ID':<36}  {'NAME':<28}  {'BORN':<10}  {'TIME ZONE':<22}  VERSION")
    for p in found:
        name = printable(f"{p.first_name} {p.last_name}")[:28]  # as the application wrote it
        click.echo(f"{p.id!s:<36}  {name:<28}  {p.date_of_birth!s:<10}  {p.time_zone:<22}  {p.version}")
    click.echo(f"{len(found)} person(s)", err=True)
    return 0


@people.command("delete", cls=Command, help=DELETE, short_help="delete a person and their events")
@click.argument("person_id", type=PERSON, metavar="ID")
@with_database
def delete(db: Database, person_id: uuid.UUID) -> int:
    """`mailroom people delete ID`: exit status 2 when there is no such person."""
    from worker.core.db import connect
    from worker.core.validation import ValidationError
    from worker.producers import birthdays

    with connect(db.url) as conn:
        if not birthdays.delete_person(conn, person_id):
            raise ValidationError("person", f"no person {person_id}")
    click.echo(f"deleted {person_id} and their events")
    return 0


def _print_next(conn: Any, person_id: uuid.UUID) -> None:
    row = conn.execute(
        "SELECT due_at, local_due_at, time_zone FROM mailroom.events"
        " WHERE person_id = %s AND status IN ('pending', 'processing')",
        (person_id,),
    ).fetchone()
    if row:
        click.echo(
            f"{person_id}: next birthday email {row['local_due_at']:%Y-%m-%d %H:%M} {row['time_zone']}"
            f" ({row['due_at']:%Y-%m-%d %H:%M} UTC)"
        )


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (v.isoformat() if hasattr(v, "isoformat") else str(v) if isinstance(v, uuid.UUID) else v)
        for k, v in values.items()
    }


@click.group(cls=Group, help=EVENTS)
def events() -> None:
    """`mailroom events ACTION`."""


@events.command("upcoming", cls=Command, help=UPCOMING, short_help="pending events due soon")
@click.option("--hours", type=Hours(), default=24.0, help="look this far ahead (default 24)")
@number_option("--limit", default=1000, help="at most this many (default 1000)")
@json_option
@with_database
def upcoming(db: Database, hours: float, limit: int, as_json: bool) -> int:
    """`mailroom events upcoming [--hours H]`: pending birthday events due within H hours."""
    from worker.core.db import connect
    from worker.core.terminal import printable
    from worker.producers.birthdays import upcoming_events

    with connect(db.url) as conn:
        found = upcoming_events(conn, hours=hours, limit=limit)
    if as_json:
        click.echo(json.dumps([_jsonable(vars(e)) for e in found], indent=2))
        return 0
    click.echo(f"{'DUE (UTC)':<16}  {'LOCAL':<16}  {'TIME ZONE':<22}  {'NAME':<28}  {'RETRIES':<7}  EVENT")
    for e in found:
        name = printable(f"{e.first_name} {e.last_name}")[:28]
        retries = f"{e.retry_count}/3" if e.retry_count else "-"
        click.echo(
            f"{e.due_at:%Y-%m-%d %H:%M}  {e.local_due_at:%Y-%m-%d %H:%M}  {e.time_zone:<22}  {name:<28}"
            f"  {retries:<7}  {e.event_id}"
        )
        if e.retry_count and e.failure_reason:
            click.echo(f"  last attempt: {printable(e.failure_reason)}")
    click.echo(f"{len(found)} event(s) due within {hours:g} hour(s)", err=True)
    return 0


@events.command("list", cls=Command, help=OUTCOMES, short_help="what became of birthday events")
@click.option("--status", type=click.Choice(OUTCOME_FILTERS), help="only events in this state")
@click.option("--person", "person_id", type=PERSON, help="every event of this person")
@number_option("--limit", default=100, help="at most this many (default 100)")
@json_option
@with_database
def list_events(
    db: Database, status: str | None, person_id: uuid.UUID | None, limit: int, as_json: bool
) -> int:
    """`mailroom events list [--status S] [--person ID]`: events by outcome, with reasons and retries."""
    from worker.core.db import connect
    from worker.core.terminal import printable
    from worker.producers.birthdays import event_outcomes

    with connect(db.url) as conn:
        found = event_outcomes(conn, status=status, person=person_id, limit=limit)
    if as_json:
        click.echo(json.dumps([_jsonable(vars(e)) for e in found], indent=2))
        return 0
    click.echo(f"{'STATUS':<10}  {'BIRTHDAY':<10}  {'NAME':<28}  {'RETRIES':<7}  {'EMAIL':<8}  EVENT")
    for e in found:
        name = printable(f"{e.first_name} {e.last_name}")[:28]
        retries = f"{e.retry_count}/3" if e.retry_count else "-"
        email = str(e.email_id) if e.email_id is not None else "-"
        click.echo(
            f"{e.status:<10}  {e.local_due_at:%Y-%m-%d}  {name:<28}  {retries:<7}  {email:<8}  {e.event_id}"
        )
        if e.status == "retrying" and e.retry_at is not None:
            click.echo(f"  next attempt {e.retry_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
        if e.failure_reason:
            click.echo(f"  {printable(e.failure_reason)}")
    click.echo(f"{len(found)} event(s)", err=True)
    return 0
