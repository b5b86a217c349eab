"""`mailroom stats`, `retry` and `cancel`: the queue as operators see and steer it."""

from __future__ import annotations

import json
from typing import Any

import click

from worker.cli.framework import Command, Database, json_option, with_database

STATS = """\
Show the queue by status, what is due now, scheduled later and retrying, the oldest pending email,
each message stream's unsent email (waiting, due now, being sent) and the sender accounts serving
it, and every sender account's streams and day so far (sent against its limit, bounces, errors,
and whether its relay is unreachable, since when and why). Changes nothing. Exit status 0.

Examples:
  mailroom stats
  mailroom stats --json | jq '.senders[] | select(.status == "unreachable")'"""

RETRY = """\
Put failed (or suppressed) emails back in the queue, due now, with their retry budget reset.
Emails in any other state are left alone and listed with their state; the exit status is then 1.
An address on the bounce or unsubscribe list is suppressed again at claim time. Each retry is
recorded in the audit trail (`mailroom audit`) with how many emails it changed.

Examples:
  mailroom retry 1201 1202
  mailroom retry --all-failed"""

CANCEL = """\
Cancel emails that are pending, failed or suppressed: they will never be sent. Emails being sent
right now, sent or already cancelled are left alone and listed; the exit status is then 1.
Each cancel is recorded in the audit trail (`mailroom audit`) with how many emails it changed.

Example:
  mailroom cancel 1201 1202"""


@click.command(cls=Command, help=STATS)
@json_option
@with_database
def stats(db: Database, as_json: bool) -> int:
    """`mailroom stats [--json]`."""
    from worker.core.db import connect
    from worker.ops.stats import queue_stats

    with connect(db.url) as conn:
        figures = queue_stats(conn, reputation_window=db.settings.health_reputation_deliveries)
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return 0
    click.echo("queue:  " + "  ".join(f"{k} {v}" for k, v in figures["queue"].items()))
    oldest = figures["oldest_pending_seconds"]
    click.echo(
        f"due now {figures['due_now']}  scheduled later {figures['scheduled_later']}  retrying {figures['retrying']}"
        f"  oldest pending {'-' if oldest is None else f'{oldest:.0f}s'}"
    )
    for name, st in figures["streams"].items():
        served = [s["name"] for s in figures["senders"] if name in s["streams"]]
        click.echo(
            f"stream {name}: {st['waiting']} waiting, {st['due_now']} due now, {st['sending']} being sent;"
            f" sent by {', '.join(served) or 'no sender account'}"
        )
    for s in figures["senders"]:
        click.echo(
            f"sender {s['name']} ({','.join(s['streams'])}): {s['status']}, {s['sent_today']}/{s['limit_today']}"
            f" today, {s['bounces_today']} bounces, {s['errors_today']} errors; {_rates(s)}"
        )
    return 0


@click.command(cls=Command, help=RETRY)
@click.argument("ids", nargs=-1, type=int, metavar="ID...")
@click.option("--all-failed", is_flag=True, help="retry every failed email")
@with_database
def retry(db: Database, ids: tuple[int, ...], all_failed: bool) -> int:
    """`mailroom retry ID...|--all-failed`."""
    from worker.core.db import connect
    from worker.ops.actions import retry as retry_emails
    from worker.ops.actions import retry_all_failed

    if not ids and not all_failed:
        raise click.UsageError("give email ids or --all-failed")
    with connect(db.url) as conn:
        result = retry_all_failed(conn) if all_failed else retry_emails(conn, list(ids))
    click.echo(result.summary("retried"))
    return 1 if result.skipped else 0


@click.command(cls=Command, help=CANCEL)
@click.argument("ids", nargs=-1, required=True, type=int, metavar="ID...")
@with_database
def cancel(db: Database, ids: tuple[int, ...]) -> int:
    """`mailroom cancel ID...`."""
    from worker.core.db import connect
    from worker.ops.actions import cancel as cancel_emails

    with connect(db.url) as conn:
        result = cancel_emails(conn, list(ids))
    click.echo(result.summary("cancelled"))
    return 1 if result.skipped else 0


def _rates(sender: dict[str, Any]) -> str:
    """Hard bounces and complaints over the sender's last deliveries, as `mailroom health` judges them."""
    if not sender["deliveries"]:
        return "no deliveries yet"
    return (
        f"of its last {sender['deliveries']} deliveries {sender['hard_bounce_rate']:.1%} bounced hard,"
        f" {sender['complaint_rate']:.2%} drew complaints"
    )
