"""`mailroom webhooks`: endpoints that receive what became of email, signed as Standard Webhooks say."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from worker.cli.framework import Command, Database, Group, json_option, with_database

WEBHOOKS = """\
Endpoints that receive events as they happen: an email sent, bounced, complained about, opened,
clicked, unsubscribed from, failed, expired, suppressed or cancelled, and a document signed. Each
event is written in the transaction of the change it reports (none for a change that rolled back,
none lost when a process dies) and POSTed by the worker as JSON, signed as the Standard Webhooks
specification says (webhook-id, webhook-timestamp, webhook-signature), so a receiver verifies it
with that specification's library in any language. Failed POSTs are retried with backoff for
MAILROOM_WEBHOOK_RETRY_HOURS (72); a receiver answering 410 Gone disables its endpoint.

An endpoint with --role receives the events of the email that database role enqueued, with their
recipients; one without is an operator's and receives every event, without recipients.

Examples:
  mailroom webhooks add https://app.example.com/hooks --events sent,bounced,complained --role shop
  mailroom webhooks list
  mailroom webhooks test 1
  mailroom webhooks replay --since 2026-11-28T10:00:00Z --endpoint 1"""

ADD = """\
Add an endpoint: URL (http or https, no credentials in it) receives the events named by --events
(short names separated by commas: sent, bounced, complained, opened, clicked, unsubscribed,
failed, expired, suppressed, cancelled, signed; or all). Its signing secret is made here and
printed once: give it to the receiver, which verifies each POST with it. It is stored encrypted
with the secret key (`mailroom keys rotate` re-encrypts it).

A URL whose host is, or resolves to, a loopback, private, link-local (cloud metadata) or other
non-public address is refused, when added and again at every POST (the addresses checked are the
ones connected to), unless --allow-private says it is a receiver you run. Redirects are not
followed. Exit status 0, 2 when refused (nothing is stored).

Examples:
  mailroom webhooks add https://app.example.com/hooks/mail --events all --role shop
  mailroom webhooks add http://127.0.0.1:9000/hooks --events failed,bounced --allow-private"""

LIST = """\
Every endpoint: its URL, whose events it receives, the events, its state (active, paused,
disabled, removing), its deliveries (pending, delivered in the last day, dead), how many attempts
failed in a row and since when, and the last error. Never the secret; a read-only role is not shown
URLs. Changes nothing. Exit status 0.

Examples:
  mailroom webhooks list
  mailroom webhooks list --json"""

PAUSE = """\
Stop POSTing to ENDPOINT; its events are still written and wait, and go in order when it is
resumed. Exit status 0, 2 when there is no such endpoint.

Examples:
  mailroom webhooks pause 1 --reason 'deploying the receiver'"""

RESUME = """\
POST to ENDPOINT again, paused or disabled by its receiver's 410 Gone, from its oldest waiting
event; its count of failures in a row starts again from zero. Exit status 0, 2 when there is no
such endpoint.

Examples:
  mailroom webhooks resume 1"""

REMOVE = """\
Delete ENDPOINT and every delivery to it: its events are no longer sent. Exit status 0, 2 when
there is no such endpoint.

Examples:
  mailroom webhooks remove 1"""

TEST = """\
POST one signed event of type webhook.test to ENDPOINT now, from this process, through the same
checks as the worker's POSTs (addresses, no redirects, the timeout), and say what the receiver
answered. Records nothing. Exit status 0 when it answered 2xx, 1 otherwise, 2 when there is no
such endpoint.

Examples:
  mailroom webhooks test 1"""

REPLAY = """\
Send the events since --since again (with their own ids: a receiver that has one already sees
the same webhook-id again) to every endpoint, or to those named with --endpoint. Events an
endpoint never had (written before it was added, while another endpoint existed) are sent too.
Exit status 0, 2 for a bad time or an endpoint that does not exist.

Examples:
  mailroom webhooks replay --since 2026-11-28T10:00:00Z
  mailroom webhooks replay --since 2026-11-28 --endpoint 2"""


@click.group(cls=Group, help=WEBHOOKS)
def webhooks() -> None:
    """`mailroom webhooks`: its actions below."""


@webhooks.command("add", cls=Command, help=ADD, short_help="add an endpoint; prints its secret once")
@click.argument("url")
@click.option(
    "--events", "names", required=True, metavar="EVENTS", help="events, separated by commas, or all"
)
@click.option(
    "--role", default=None, metavar="ROLE", help="the application role whose email's events it receives"
)
@click.option("--allow-private", is_flag=True, help="allow loopback, private and link-local addresses")
@json_option
@with_database
def add(db: Database, url: str, names: str, role: str | None, allow_private: bool, as_json: bool) -> int:
    """Add one endpoint and print its secret."""
    from worker.core.crypto import secret_box
    from worker.core.db import connect
    from worker.hooks.endpoints import EndpointError
    from worker.hooks.endpoints import add as add_endpoint
    from worker.hooks.events import UnknownEvent, event_types
    from worker.ops.audit import cli_actor

    try:
        events = event_types(names.split(","))
        with connect(db.url) as conn:
            added = add_endpoint(
                conn, secret_box(db.settings), url, events, role=role, allow_private=allow_private,
                actor=cli_actor(),
            )  # fmt: skip
    except (EndpointError, UnknownEvent) as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    if as_json:
        click.echo(json.dumps({"id": added.id, "secret": added.secret, "events": events}))
    else:
        click.echo(f"endpoint {added.id} added: {', '.join(events)}")
        click.echo(f"secret (shown this once; the receiver verifies each POST with it): {added.secret}")
    return 0


@webhooks.command("list", cls=Command, help=LIST, short_help="endpoints and their deliveries")
@json_option
@with_database
def list_(db: Database, as_json: bool) -> int:
    """Print every endpoint."""
    from worker.cli.table import table
    from worker.core.db import connect
    from worker.ops.webhook_endpoints import endpoints

    with connect(db.url) as conn:
        rows = endpoints(conn)
    if as_json:
        click.echo(json.dumps(rows, default=str, indent=2))
        return 0
    if not rows:
        click.echo("no webhook endpoint (mailroom webhooks add URL --events ...)")
        return 0
    headers = (
        "ID",
        "URL",
        "ROLE",
        "EVENTS",
        "STATUS",
        "PENDING",
        "DELIVERED",
        "DEAD",
        "FAILING",
        "LAST ERROR",
    )
    lines = table(headers, [_row(r) for r in rows], right=frozenset({0, 5, 6, 7}))
    click.echo("\n".join(lines))
    return 0


def _row(r: dict[str, Any]) -> list[str]:
    events = ",".join(e.split(".", 1)[1] for e in r["events"])
    status = r["status"] + (f" ({r['status_reason']})" if r["status_reason"] else "")
    failing = f"{r['failures']} since {r['failing_since']:%Y-%m-%d %H:%M}" if r["failing_since"] else "-"
    return [
        str(r["id"]), r["url"] or "(hidden from this role)", r["owner_role"] or "(operators: every email)", events, status,
        str(r["pending"]), str(r["delivered"]), str(r["dead"]), failing, r["last_error"] or "-",
    ]  # fmt: skip


def _status_command(name: str, status: str, text: str, summary: str) -> None:
    @webhooks.command(name, cls=Command, help=text, short_help=summary)
    @click.argument("endpoint", type=int)
    @click.option("--reason", default=None, help="why, for the audit log and `webhooks list`")
    @with_database
    def change(db: Database, endpoint: int, reason: str | None) -> int:
        from worker.core.db import connect
        from worker.ops.audit import cli_actor
        from worker.ops.webhook_endpoints import set_status

        with connect(db.url) as conn:
            found = set_status(conn, endpoint, status, reason=reason, actor=cli_actor())
        if not found:
            click.echo(f"error: no webhook endpoint {endpoint}", err=True)
            return 2
        click.echo(f"endpoint {endpoint} {status}")
        return 0


_status_command("pause", "paused", PAUSE, "stop POSTing to an endpoint; its events wait")
_status_command("resume", "active", RESUME, "POST to a paused or disabled endpoint again")


@webhooks.command("remove", cls=Command, help=REMOVE, short_help="delete an endpoint and its deliveries")
@click.argument("endpoint", type=int)
@with_database
def remove(db: Database, endpoint: int) -> int:
    """Delete one endpoint."""
    from worker.core.db import connect
    from worker.ops.audit import cli_actor
    from worker.ops.webhook_endpoints import remove as remove_endpoint

    with connect(db.url) as conn:
        found = remove_endpoint(conn, endpoint, actor=cli_actor())
    if not found:
        click.echo(f"error: no webhook endpoint {endpoint}", err=True)
        return 2
    click.echo(f"endpoint {endpoint} removed")
    return 0


@webhooks.command("replay", cls=Command, help=REPLAY, short_help="send the events since a time again")
@click.option(
    "--since", "since_text", required=True, metavar="TIME", help="ISO 8601 time or date (UTC if no zone)"
)
@click.option("--endpoint", "wanted", type=int, multiple=True, help="only this endpoint (repeatable)")
@with_database
def replay(db: Database, since_text: str, wanted: tuple[int, ...]) -> int:
    """Mark the events since a time as due again."""
    from worker.core.db import connect
    from worker.ops.audit import cli_actor
    from worker.ops.webhook_endpoints import known_ids
    from worker.ops.webhook_endpoints import replay as replay_events

    try:
        since = datetime.fromisoformat(since_text)
    except ValueError:
        click.echo(f"error: --since {since_text!r} is no ISO 8601 time (2026-11-28T10:00:00Z)", err=True)
        return 2
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    with connect(db.url) as conn:
        ids = known_ids(conn, list(wanted) if wanted else None)
        missing = sorted(set(wanted) - set(ids))
        if missing:
            click.echo(f"error: no webhook endpoint {', '.join(map(str, missing))}", err=True)
            return 2
        count = replay_events(conn, ids, since, actor=cli_actor())
    click.echo(f"{count} deliveries due again to {len(ids)} endpoint(s)")
    return 0


@webhooks.command("test", cls=Command, help=TEST, short_help="POST a signed test event to an endpoint now")
@click.argument("endpoint", type=int)
@with_database
def test(db: Database, endpoint: int) -> int:
    """POST a test event and print the answer."""
    import asyncio

    from worker.core.crypto import secret_box
    from worker.core.db import connect
    from worker.hooks.trial import post_test

    with connect(db.url) as conn:
        row = conn.execute(
            "SELECT url, secret_encrypted, allow_private FROM mailroom.webhook_endpoints WHERE id = %s",
            (endpoint,),
        ).fetchone()
    if row is None:
        click.echo(f"error: no webhook endpoint {endpoint}", err=True)
        return 2
    code, error = asyncio.run(post_test(endpoint, row, secret_box(db.settings), db.settings))
    if error is None:
        click.echo(f"endpoint {endpoint} answered {code}")
        return 0
    click.echo(f"endpoint {endpoint}: {error}", err=True)
    return 1
