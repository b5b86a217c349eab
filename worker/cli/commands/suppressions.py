"""`mailroom suppressions list|history|add|remove|export|import`: the addresses Mailroom does not mail."""

from __future__ import annotations

import json
import sys
from datetime import UTC
from typing import Any

import click

from worker.cli.framework import Command, Database, Group, json_option, number_option, with_database

KIND_CHOICE = click.Choice(("hard", "soft", "complaint", "unsubscribe", "manual"))

GROUP = """\
The suppression list: the addresses Mailroom does not mail, and why. A hard bounce (a relay refused
the mailbox, during the SMTP session or later in a DSN), a complaint (the recipient reported spam),
an operator's suppression (manual) and three soft bounces stop all email to the address; an
unsubscribe stops email that is not transactional. An email enqueued to a suppressed address is
stored `suppressed` at once; the worker checks again when it claims email, so an address suppressed
after enqueueing is not mailed either. Every change is kept in the address's history (history) and
changes made here are in the audit log (`mailroom audit --action suppression`).

Examples:
  mailroom suppressions list --kind complaint
  mailroom suppressions history ada@example.com
  mailroom suppressions add ada@example.com --reason "asked by phone to receive nothing"
  mailroom suppressions remove ada@example.com --reason "mailbox fixed, confirmed by the customer"
  mailroom suppressions export suppressions.csv
  mailroom suppressions import from-old-provider.csv
"""

LIST = """\
List the suppressed addresses, most recently listed first: the address, its kind (hard, soft,
complaint, unsubscribe, manual), what it stops (all email; non-transactional email for an
unsubscribe; a one-day hold after each bounce for a soft bounce seen fewer than three times), since
when, how many times, the reported status and the reason. An address on both lists shows twice.
--search matches part of the address or of the reason.

Exit status: 0 listed (an empty list too).

Examples:
  mailroom suppressions list
  mailroom suppressions list --kind hard --search example.org
  mailroom suppressions list --json | jq -r '.[].address'
"""

HISTORY = """\
Show every event of one address, newest first, however it arrived: a relay's refusal during the
SMTP session (source smtp), a DSN or a complaint report (dsn, arf, plain), a provider's webhook,
an unsubscribe (one_click, link, mailto), an operator or an import, and each lift, with who did it.
ADDRESS may be given in any case; an internationalised domain matches its ASCII form.

Exit status: 0 shown (nothing recorded too); 2 ADDRESS is not an email address.

Examples:
  mailroom suppressions history ada@example.com
  mailroom suppressions history Ada@Example.COM --json
"""

ADD = """\
Suppress ADDRESS by hand: no email is sent to it any more, transactional email included. Email
already queued for it is suppressed when a worker claims it. An address already suppressed (hard,
complaint or manual) is left as it is; a soft listing becomes manual. The change is audited
(suppression.add) with your OS user and the reason, and recorded in the address's history.

Exit status: 0 suppressed (or already); 2 bad ADDRESS or --reason.

Examples:
  mailroom suppressions add ada@example.com --reason "asked by phone to receive nothing"
"""

REMOVE = """\
Lift every suppression of ADDRESS (bounce, complaint, manual, unsubscribe): email enqueued from now
on is sent to it again. Email already stored `suppressed` stays so (enqueue it again if it is still
wanted). Lifting a complaint needs --force: the recipient reported your email as spam, and mailing
them again risks more complaints and the sender's standing with mailbox providers. Lifting an
unsubscribe should follow the recipient's own request to be mailed again. The change is audited
(suppression.remove) with your OS user and the reason, and recorded in the address's history.

Exit status: 0 lifted; 1 ADDRESS was not suppressed, or it complained and --force was not given
(nothing changed); 2 bad ADDRESS or --reason.

Examples:
  mailroom suppressions remove ada@example.com --reason "mailbox fixed, confirmed by the customer"
  mailroom suppressions remove bob@example.com --reason "asked to be mailed again" --force
"""

EXPORT = """\
Write the suppression list as CSV (address,kind,reason,since; since in UTC) to FILE, or to standard
output when FILE is - or missing. Addresses and reasons are outsiders' text, and a spreadsheet may
split a line on ; tab or | as well as on commas: wherever a cell could start (a field's start, or
after one of , ; | tab or a line break inside it, spaces and double quotes after it skipped), an
apostrophe is written before = + - @ a tab, a carriage return or an apostrophe, so no spreadsheet
runs it as a formula; `suppressions import` takes those apostrophes off again.

Exit status: 0 written; 2 FILE cannot be written.

Examples:
  mailroom suppressions export suppressions.csv
  mailroom suppressions export --kind unsubscribe - | head
"""

IMPORT = """\
Add the addresses of a CSV file to the suppression list, for example one exported from another
provider. The first line names the columns: an address column (address, email, email address or
recipient) is required; kind (hard, complaint, unsubscribe or manual, and providers' words such as
bounce, spam report, unsubscribed; empty means manual) and reason are read when present; other
columns are ignored. Every line is checked first: when any is bad (not an address, an unknown kind,
a cell over 4096 characters, broken quoting, not UTF-8), each bad line is reported by its number
and nothing is imported. Importing the same file again changes nothing: addresses already
suppressed are left as they are. On a terminal, progress is shown on standard error for large files.

Exit status: 0 imported; 1 bad lines, nothing imported; 2 FILE cannot be read.

Examples:
  mailroom suppressions import from-old-provider.csv
  printf 'email,type\\nada@example.com,bounce\\n' | mailroom suppressions import -
"""


@click.group(cls=Group, help=GROUP)
def suppressions() -> None:
    """`mailroom suppressions`: its actions below."""


@suppressions.command("list", cls=Command, help=LIST, short_help="list the suppressed addresses")
@click.option("--kind", type=KIND_CHOICE, help="only this kind")
@click.option("--search", metavar="TEXT", help="only addresses or reasons containing TEXT")
@number_option("--limit", default=100, help="show at most N (default 100)")
@json_option
@with_database
def list_command(db: Database, kind: str | None, search: str | None, limit: int, as_json: bool) -> int:
    """Print the suppressed addresses."""
    from worker.cli.table import table
    from worker.core.db import connect
    from worker.ops.suppressions import list_suppressions

    with connect(db.url) as conn:
        rows = list_suppressions(conn, kind=kind, search=search, limit=limit)
    items = [
        {
            "address": r["address"],
            "kind": r["kind"],
            "stops": r["stops"],
            "since": _when(r["since"]),
            "last": _when(r["last_at"]),
            "times": r["times"],
            "status": r["status"],
            "reason": r["reason"],
            "sender": r["sender"],
            "campaign": r["campaign_id"],
        }
        for r in rows
    ]
    if as_json:
        click.echo(json.dumps(items, indent=2))
    elif not items:
        click.echo("no address is suppressed" + (" that matches" if kind or search else ""))
    else:
        headers = ("address", "kind", "stops", "since (UTC)", "times", "status", "reason")
        cells = [
            (
                i["address"],
                i["kind"],
                i["stops"],
                i["since"][:16].replace("T", " "),
                str(i["times"]),
                i["status"] or "-",
                " ".join((i["reason"] or "-").split())[:80],
            )
            for i in items
        ]
        click.echo("\n".join(table(headers, cells, right=frozenset({4}))))
    return 0


@suppressions.command("history", cls=Command, help=HISTORY, short_help="every event of one address")
@click.argument("address")
@number_option("--limit", default=200, help="show at most N (default 200)")
@json_option
@with_database
def history_command(db: Database, address: str, limit: int, as_json: bool) -> int:
    """Print one address's history."""
    from worker.cli.table import table
    from worker.core.db import connect
    from worker.ops.suppressions import history, normalise

    with connect(db.url) as conn:
        rows = history(conn, address, limit=limit)
    items = [history_item(r) for r in rows]
    if as_json:
        click.echo(json.dumps(items, indent=2))
    elif not items:
        click.echo(f"nothing recorded for {normalise(address)}")
    else:
        headers = ("when (UTC)", "change", "kind", "source", "status", "email", "by", "reason")
        cells = [
            (
                i["at"][:19].replace("T", " "),
                i["change"],
                i["kind"],
                i["source"],
                i["status"] or "-",
                str(i["email_id"] or "-"),
                i["actor"],
                " ".join((i["reason"] or "-").split())[:100],
            )
            for i in items
        ]
        click.echo("\n".join(table(headers, cells)))
    return 0


@suppressions.command("add", cls=Command, help=ADD, short_help="suppress an address by hand")
@click.argument("address")
@click.option("--reason", required=True, help="why (kept in the history and the audit log)")
@with_database
def add_command(db: Database, address: str, reason: str) -> int:
    """Suppress one address."""
    from worker.core.db import connect
    from worker.ops.audit import cli_actor
    from worker.ops.suppressions import add, normalise

    with connect(db.url) as conn:
        added = add(conn, address, reason, cli_actor())
    verdict = "suppressed" if added else "already suppressed, left as it was"
    click.echo(f"suppressions: {normalise(address)} {verdict}")
    return 0


@suppressions.command("remove", cls=Command, help=REMOVE, short_help="lift an address's suppressions")
@click.argument("address")
@click.option("--reason", required=True, help="why (kept in the history and the audit log)")
@click.option("--force", is_flag=True, help="lift a complaint too")
@with_database
def remove_command(db: Database, address: str, reason: str, force: bool) -> int:
    """Lift one address's suppressions."""
    from worker.core.db import connect
    from worker.ops.audit import cli_actor
    from worker.ops.suppressions import SuppressionError, remove

    try:
        with connect(db.url) as conn:
            lifted = remove(conn, address, reason, cli_actor(), force=force)
    except SuppressionError as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    if not lifted.kinds:
        click.echo(f"suppressions: {lifted.address} is not suppressed", err=True)
        return 1
    click.echo(
        f"suppressions: lifted {', '.join(lifted.kinds)} for {lifted.address}: email enqueued from now on"
        " is sent to it"
    )
    return 0


@suppressions.command("export", cls=Command, help=EXPORT, short_help="write the list as CSV")
@click.argument("file", default="-", required=False, metavar="[FILE|-]")
@click.option("--kind", type=KIND_CHOICE, help="only this kind")
@with_database
def export_command(db: Database, file: str, kind: str | None) -> int:
    """Write the list as CSV."""
    from worker.core.config import ConfigError
    from worker.core.db import connect
    from worker.ops.suppression_csv import export_csv

    with connect(db.url) as conn:
        if file == "-":
            count = export_csv(conn, sys.stdout, kind)
        else:
            try:
                handle = open(file, "w", encoding="utf-8", newline="")  # noqa: SIM115 (closed below)
            except OSError as exc:
                raise ConfigError(f"cannot write {file}: {exc.strerror}") from None
            with handle:
                count = export_csv(conn, handle, kind)
    click.echo(f"suppressions: exported {count} address(es)", err=True)
    return 0


@suppressions.command("import", cls=Command, help=IMPORT, short_help="add the addresses of a CSV file")
@click.argument("file", metavar="FILE|-")
@with_database
def import_command(db: Database, file: str) -> int:
    """Import a CSV file whole, or nothing of it."""
    from worker.core.config import ConfigError
    from worker.core.db import connect
    from worker.ops.audit import cli_actor
    from worker.ops.suppression_csv import import_csv, text_lines

    try:
        raw = sys.stdin.buffer if file == "-" else open(file, "rb")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}") from None
    show = sys.stderr.isatty()

    def progress(lines: int) -> None:
        if show and lines:
            click.echo(f"\rsuppressions: {lines:,} lines checked", nl=False, err=True)

    with raw, connect(db.url) as conn:
        result = import_csv(conn, text_lines(raw), cli_actor(), source_name=file, progress=progress)
        if show:
            click.echo(err=True)
        if result.error_count:
            conn.rollback()
            for line, message in result.errors:
                click.echo(f"{file}:{line}: {_printable(message)}", err=True)
            more = result.error_count - len(result.errors)
            if more > 0:
                click.echo(f"... and {more} more bad line(s)", err=True)
            click.echo(f"suppressions: nothing imported: {result.error_count} bad line(s)", err=True)
            return 1
    click.echo(
        f"suppressions: imported {result.lines} line(s): {result.added} address(es) added,"
        f" {result.unchanged} already suppressed or repeated"
    )
    return 0


def history_item(r: dict[str, Any]) -> dict[str, Any]:
    """One history row as JSON (`suppressions history --json`, `bounces list --json`)."""
    return {
        "id": r["id"],
        "at": _when(r["occurred_at"]),
        "address": r["address"],
        "change": r["change"],
        "kind": r["kind"],
        "source": r["source"],
        "status": r["status"],
        "reason": r["reason"],
        "email_id": r["email_id"],
        "sender": r["sender"],
        "campaign": r["campaign_id"],
        "actor": r["actor"],
    }


def _when(value: Any) -> str:
    return str(value.astimezone(UTC).isoformat()) if value is not None else ""


def _printable(text: str) -> str:
    from worker.core.terminal import printable

    return printable(text)
