"""`mailroom people add|update|list|delete` and `mailroom events upcoming`: birthday email recipients."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from datetime import date
from typing import Any

from worker.cli.argtypes import positive_count as _count
from worker.core.config import Settings
from worker.core.terminal import printable
from worker.core.validation import ValidationError

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
with their UTC and local times. Changes nothing.

Examples:
  mailroom events upcoming
  mailroom events upcoming --hours 168 --json"""

UPCOMING = """\
List pending birthday events due within --hours (default 24), overdue ones first, with their UTC
and local times, time zone, name and event id. Changes nothing. The count goes to standard error.
Exit status 0.

Examples:
  mailroom events upcoming
  mailroom events upcoming --hours 168 --json"""


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date like 1990-05-17") from None


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_HOURS:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours above 0 and up to {MAX_HOURS}")
    return value


def _uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a person id (a UUID)") from None


def cmd_people(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch `mailroom people ACTION`."""
    from worker.core.db import connect, database_url
    from worker.producers import birthdays

    with connect(database_url(settings)) as conn:
        if args.people_command == "add":
            person_id = birthdays.add_person(
                conn,
                email=args.email,
                first_name=args.first_name,
                last_name=args.last_name,
                date_of_birth=args.born,
                time_zone=args.tz,
                locale=args.locale,
                settings=settings,
            )
            _print_next(conn, person_id)
            return 0
        if args.people_command == "update":
            changes = {
                key: value
                for key, value in (
                    ("email", args.email),
                    ("first_name", args.first_name),
                    ("last_name", args.last_name),
                    ("date_of_birth", args.born),
                    ("time_zone", args.tz),
                    ("locale", args.locale),
                )
                if value is not None
            }
            person = birthdays.update_person(
                conn, args.id, changes, settings=settings, expected_version=args.version
            )
            print(f"updated {person.id} (version {person.version})")
            _print_next(conn, person.id)
            return 0
        if args.people_command == "delete":
            if not birthdays.delete_person(conn, args.id):
                raise ValidationError("person", f"no person {args.id}")
            print(f"deleted {args.id} and their events")
            return 0
        people = birthdays.list_people(conn, args.limit)
        if args.json:
            print(json.dumps([_jsonable(vars(p)) for p in people], indent=2))
            return 0
        print(f"{'ID':<36}  {'NAME':<28}  {'BORN':<10}  {'TIME ZONE':<22}  VERSION")
        for p in people:
            name = printable(f"{p.first_name} {p.last_name}")[:28]  # as the application wrote it
            print(f"{p.id!s:<36}  {name:<28}  {p.date_of_birth!s:<10}  {p.time_zone:<22}  {p.version}")
        print(f"{len(people)} person(s)", file=sys.stderr)
        return 0


def _print_next(conn: Any, person_id: uuid.UUID) -> None:
    row = conn.execute(
        "SELECT due_at, local_due_at, time_zone FROM mailroom.events"
        " WHERE person_id = %s AND status IN ('pending', 'processing')",
        (person_id,),
    ).fetchone()
    if row:
        print(
            f"{person_id}: next birthday email {row['local_due_at']:%Y-%m-%d %H:%M} {row['time_zone']}"
            f" ({row['due_at']:%Y-%m-%d %H:%M} UTC)"
        )


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (v.isoformat() if hasattr(v, "isoformat") else str(v) if isinstance(v, uuid.UUID) else v)
        for k, v in values.items()
    }


def cmd_events(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom events upcoming [--hours H]`: pending birthday events due within H hours."""
    from worker.core.db import connect, database_url
    from worker.producers.birthdays import upcoming_events

    with connect(database_url(settings)) as conn:
        events = upcoming_events(conn, hours=args.hours, limit=args.limit)
    if args.json:
        print(json.dumps([_jsonable(vars(e)) for e in events], indent=2))
        return 0
    print(f"{'DUE (UTC)':<16}  {'LOCAL':<16}  {'TIME ZONE':<22}  {'NAME':<28}  EVENT")
    for e in events:
        name = printable(f"{e.first_name} {e.last_name}")[:28]
        print(
            f"{e.due_at:%Y-%m-%d %H:%M}  {e.local_due_at:%Y-%m-%d %H:%M}  {e.time_zone:<22}  {name:<28}"
            f"  {e.event_id}"
        )
    print(f"{len(events)} event(s) due within {args.hours:g} hour(s)", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom people` and `mailroom events`."""
    parser = sub.add_parser(
        "people",
        help="people whose birthday gets an email in their time zone",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="people_command", required=True, metavar="ACTION")
    raw = argparse.RawDescriptionHelpFormatter
    add = actions.add_parser(
        "add", help="add a person (their next birthday is scheduled)", description=ADD, formatter_class=raw
    )
    add.add_argument("email", help="email address")
    add.add_argument("first_name", metavar="FIRST", help="first name")
    add.add_argument("last_name", metavar="LAST", help="last name")
    add.add_argument("--born", type=_date, required=True, metavar="YYYY-MM-DD", help="date of birth")
    add.add_argument("--tz", required=True, metavar="ZONE", help="IANA time zone, e.g. Asia/Kathmandu")
    add.add_argument("--locale", default="en", help="language of the email (default en)")
    upd = actions.add_parser(
        "update",
        help="change a person (zone or birth date changes reschedule)",
        description=UPDATE,
        formatter_class=raw,
    )
    upd.add_argument("id", type=_uuid, metavar="ID", help="the person's id")
    upd.add_argument("--email")
    upd.add_argument("--first-name")
    upd.add_argument("--last-name")
    upd.add_argument("--born", type=_date, metavar="YYYY-MM-DD")
    upd.add_argument("--tz", metavar="ZONE")
    upd.add_argument("--locale")
    upd.add_argument(
        "--version", type=int, help="apply only if the person is still at this version (from list)"
    )
    lst = actions.add_parser("list", help="list people", description=LIST, formatter_class=raw)
    lst.add_argument("--limit", type=_count, default=1000, help="at most this many (default 1000)")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    delete = actions.add_parser(
        "delete", help="delete a person and their events", description=DELETE, formatter_class=raw
    )
    delete.add_argument("id", type=_uuid, metavar="ID")
    parser.set_defaults(handler=cmd_people)

    events = sub.add_parser(
        "events",
        help="scheduled birthday events",
        description=EVENTS,
        formatter_class=raw,
    )
    e_actions = events.add_subparsers(dest="events_command", required=True, metavar="ACTION")
    upcoming = e_actions.add_parser(
        "upcoming", help="pending events due soon", description=UPCOMING, formatter_class=raw
    )
    upcoming.add_argument("--hours", type=_hours, default=24.0, help="look this far ahead (default 24)")
    upcoming.add_argument("--limit", type=_count, default=1000, help="at most this many (default 1000)")
    upcoming.add_argument("--json", action="store_true", help="machine-readable output")
    events.set_defaults(handler=cmd_events)
