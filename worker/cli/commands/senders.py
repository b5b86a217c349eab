"""`mailroom senders`: add, edit, list, pause, resume, suspend and remove sender accounts."""

from __future__ import annotations

import json
from typing import Any

import click

from worker.cli.commands.sender_add import add
from worker.cli.commands.sender_edit import edit
from worker.cli.commands.senders_check import check
from worker.cli.framework import Command, Database, Group, confirmed_by_typing, json_option, with_database

SENDERS = """\
Add, edit, list, pause, resume, suspend and remove the SMTP accounts email goes out through. Every
change is recorded in the audit trail (`mailroom audit`). Passwords never go on the command line:
they come from an environment variable, a file, or a prompt on a terminal.

Examples:
  SMTP_PASSWORD=... mailroom senders add transactional-1 --from noreply@example.com \\
      --host smtp.example.com --port 587 --username mailer --password-env SMTP_PASSWORD
  mailroom senders list
  mailroom senders edit transactional-1 --daily-limit 5000
  mailroom senders suspend transactional-1 --reason 'credentials revoked'"""

LIST = """\
List sender accounts: status (unreachable when the relay fails; an account paused at yesterday's
limit shows as sending again), today's usage against its limit (UTC day), warm-up, From address
and SMTP host, and how it logs in (password or oauth2), all printed whole (a row wider than the
terminal wraps). For an unreachable account a second line says since when and why; one with its
own bounce domain or relay provider says so on a line below, one with its own batch size or a
send delay says so on another, and so does one whose last DNS check
(`mailroom senders check`) found a warning or a problem. Never a password or OAuth2 secret.
Changes nothing. Exit status 0.

Examples:
  mailroom senders list
  mailroom senders list --json | jq '.[] | {name, status, sent_today, effective_limit}'"""

PAUSE = """\
Stop sending through an account until it is resumed; emails go out through the other accounts.
Emails being sent right now finish. Suspended accounts are refused (and left alone).
Exit status 0 when paused, 1 when there is no such account or it cannot be paused.

Example:
  mailroom senders pause transactional-1 --reason 'relay maintenance'"""

RESUME = """\
Send through a paused or suspended account again (warming up again if its warm-up is not over).
An account that has already reached today's limit shows as paused at its limit and resumes by
itself at 00:00 UTC; one paused at its limit is resumed now only if its limit was raised.
Exit status 0 when resumed, 1 when there is no such account or it is not paused or suspended.

Example:
  mailroom senders resume transactional-1"""

SUSPEND = """\
Take an account out of service (credentials revoked, a relay that rejects it). Unlike pause, it
says something is wrong; a worker suspends an account by itself when the relay refuses its login.
Emails being sent right now finish. Exit status 0 when suspended, 1 when there is no such account
or it is suspended already.

Example:
  mailroom senders suspend transactional-1 --reason 'credentials revoked'"""

REMOVE = """\
Delete a sender account with its usage and pacing rows. Refused while emails are bound to it
(pending or being sent through it, or claimed by a worker), saying how many: pause it so that the
other accounts take them over, or cancel them, then remove it. A paused or suspended account is
held only by its open claims (its pending email goes through the others). Sent email and the send
log keep their history. Asks on a terminal unless --yes; without a terminal --yes is required.
Audited as sender.remove.
Exit status 0 when removed, 1 when refused, not confirmed or there is no such account, 2 without
--yes off a terminal.

Examples:
  mailroom senders remove old-relay
  mailroom senders remove old-relay --yes"""


@click.group(cls=Group, help=SENDERS)
def senders() -> None:
    """`mailroom senders ACTION`."""


senders.add_command(add)
senders.add_command(edit)
senders.add_command(check)


@senders.command("list", cls=Command, help=LIST, short_help="list sender accounts with today's usage")
@json_option
@with_database
def list_senders(db: Database, as_json: bool) -> int:
    """`mailroom senders list [--json]`."""
    from worker.cli.table import table
    from worker.core.db import connect
    from worker.ops.dns_checks import summary
    from worker.ops.senders import list_senders as senders_of

    with connect(db.url) as conn:
        rows = senders_of(conn)
        dns = summary(conn)
    for r in rows:
        r["dns"] = dns.get(r["name"])  # None: never checked
    if as_json:
        click.echo(json.dumps(rows, default=str, indent=2))
        return 0
    cells = []
    for r in rows:
        # Stage 0 is a finished (or never started) warm-up: its old limit no longer applies.
        warmup = f"stage {r['warmup_stage']}/5 {r['warmup_limit']}/day" if r["warmup_stage"] else "-"
        host = f"{r['smtp_host']}:{r['smtp_port']}"
        usage = f"{r['sent_today']}/{r['effective_limit']}"
        streams = ",".join(r["streams"])
        cells.append([r["name"], r["status"], usage, warmup, r["from_email"], streams, host, _auth(r)])
    header = ("NAME", "STATUS", "TODAY", "WARM-UP", "FROM", "STREAMS", "HOST", "AUTH")
    lines = table(header, cells, right=frozenset({2}))
    click.echo(lines[0])
    for r, line in zip(rows, lines[1:], strict=True):
        click.echo(line)
        if r["status"] == "unreachable":
            click.echo(f"  since {r['circuit_since']:%Y-%m-%d %H:%M:%S}: {r['status_reason']}")
        returns = [f"bounce domain {r['bounce_domain']}"] if r["bounce_domain"] else []
        returns += [f"tagged for {r['relay_provider']}"] if r["relay_provider"] else []
        if returns:
            click.echo(f"  {', '.join(returns)}")
        if r["from_domains"] != [r["from_email"].rpartition("@")[2].lower()]:
            click.echo(f"  an email's own From may be in {', '.join(r['from_domains'])}")
        pacing = [f"batch {r['batch_size']}"] if r["batch_size"] else []
        pacing += [f"{r['send_delay_ms']} ms between emails"] if r["send_delay_ms"] else []
        if pacing:
            click.echo(f"  {', '.join(pacing)}")
        if r["dns"] and r["dns"] != "ok":
            click.echo(f"  DNS {r['dns']} (mailroom senders check {r['name']})")
    return 0


def _auth(row: dict[str, Any]) -> str:
    """How the account logs in, as the AUTH column says it: none for a relay without a login."""
    if row["auth_type"] == "password" and not row["smtp_username"]:
        return "none"
    return str(row["auth_type"])


REASON = click.option("--reason", help="why, shown to other operators")


@senders.command("pause", cls=Command, help=PAUSE, short_help="stop sending until resumed")
@click.argument("name")
@REASON
@with_database
def pause(db: Database, name: str, reason: str | None) -> int:
    """`mailroom senders pause NAME [--reason TEXT]`."""
    return _set_status(db, name, "paused", reason)


@senders.command("resume", cls=Command, help=RESUME, short_help="start sending again")
@click.argument("name")
@with_database
def resume(db: Database, name: str) -> int:
    """`mailroom senders resume NAME`."""
    return _set_status(db, name, "active", None)


@senders.command(
    "suspend",
    cls=Command,
    help=SUSPEND,
    short_help="take out of service (e.g. credentials revoked)",
)
@click.argument("name")
@REASON
@with_database
def suspend(db: Database, name: str, reason: str | None) -> int:
    """`mailroom senders suspend NAME [--reason TEXT]`."""
    return _set_status(db, name, "suspended", reason)


def _set_status(db: Database, name: str, target: str, reason: str | None) -> int:
    from worker.core.db import connect
    from worker.ops.senders import set_sender_status

    with connect(db.url) as conn:
        try:
            status = set_sender_status(conn, name, target, reason)
        except (LookupError, ValueError) as exc:
            click.echo(f"error: {str(exc).strip(chr(34))}", err=True)
            return 1
    click.echo(f"sender account {name} is now {status}")
    return 0


@senders.command(
    "remove", cls=Command, help=REMOVE, short_help="delete a sender account no email is bound to"
)
@click.argument("name")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@with_database
def remove(db: Database, name: str, yes: bool) -> int:
    """`mailroom senders remove NAME [--yes]`."""
    from worker.core.db import connect
    from worker.ops.senders import SenderInUse, remove_sender

    question = f"Remove sender account {name}? This cannot be undone. Type its name to confirm"
    refusal = "removing a sender account cannot be undone: add --yes to confirm"
    if not yes and not confirmed_by_typing(question, name, refusal=refusal):
        return 1
    with connect(db.url) as conn:
        try:
            sender_id = remove_sender(conn, name)
        except (LookupError, SenderInUse) as exc:
            click.echo(f"error: {str(exc).strip(chr(34))}", err=True)
            return 1
    click.echo(f"removed sender account {name} (id {sender_id})")
    return 0
