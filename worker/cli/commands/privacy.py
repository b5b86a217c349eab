"""`mailroom privacy export|erase EMAIL`: answer access and erasure requests for one address."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from worker.cli.framework import (
    Command,
    Database,
    Group,
    confirmed_by_typing,
    json_option,
    private_output,
    with_database,
    yes_option,
)

if TYPE_CHECKING:
    from pathlib import Path

EXPORT_HELP = """\
Write everything stored about EMAIL as one JSON document: its emails (queued, and archived in any
final state: sent, failed, expired, cancelled, suppressed), every delivery attempt (archived send
logs included), opens, clicks,
tracked links, unsubscribe and bounce entries, inbox events, document signers, signatures and
reminders, accounts and people rows. Written to standard output, or to --output (created with mode
0600). The export is recorded in the audit trail (action privacy.export, your OS user, the address
masked, how many rows). Nothing is changed or erased. Exit status 0, 2 when EMAIL is not an address.

Examples:
  mailroom privacy export ada@example.com -o ada-export.json
  mailroom privacy export ada@example.com | jq '.emails | length'"""

ERASE_HELP = """\
Anonymise EMAIL everywhere, in one transaction, archive files of every final state included (sent,
failed, expired, cancelled, suppressed) and of send logs: the address becomes
erased-<random>@erased.invalid; names, subjects, bodies, template data, IP addresses and user agents
are cleared. Counts, timestamps and
statuses stay. Email not yet sent to it is cancelled. Signatures are kept unchanged (signed
evidence; rewriting them would break the chain), and so are the signers of documents they signed and
those documents' reminder logs: `docs verify` still passes and `privacy export` still lists them.
Signer rows of documents not yet signed are anonymised and get no more reminders. While a worker is
sending email to the address the erasure is refused (exit status 2, nothing changed): run it again
once that send is done. The address is put on no list unless --suppress is given, which keeps it (or
puts it) on the unsubscribe list with source 'privacy'. The erasure is recorded in the audit trail
(action privacy.erase, your OS user, the address masked, how many rows) in the same transaction.
Asks on a terminal unless --yes; without a terminal --yes is required.
Exit status 0 when erased, 1 when not confirmed, 2 when refused (nothing changed).

Examples:
  mailroom privacy erase ada@example.com
  mailroom privacy erase ada@example.com --suppress --yes --json"""

PRIVACY = """\
Answer a data subject's access (export) or erasure (erase) request for one email address.

Examples:
  mailroom privacy export ada@example.com -o ada-export.json
  mailroom privacy erase ada@example.com --suppress"""


def _progress(verb: str) -> Callable[[int, int], None]:
    """Report the archive scan on stderr about twenty times, whatever the number of files."""

    def report(done: int, total: int) -> None:
        if done == total or done % max(1, total // 20) == 0:
            click.echo(f"privacy: {verb} {done}/{total} archive files", err=True)

    return report


@click.group(cls=Group, help=PRIVACY)
def privacy() -> None:
    """`mailroom privacy`: its actions below."""


@privacy.command(
    "export", cls=Command, help=EXPORT_HELP, short_help="write everything stored about EMAIL as JSON"
)
@click.argument("email", metavar="EMAIL")
@click.option("-o", "--output", help="file to write (mode 0600) instead of standard output")
@with_database
def export(db: Database, email: str, output: str | None) -> int:
    """Write the export to stdout or --output; its audit row is committed with it."""
    from worker.core.db import connect
    from worker.ops.archive_files import archive_directory
    from worker.ops.audit import cli_actor
    from worker.ops.privacy import export_address, jsonable, normalise

    address = normalise(email)
    directory = archive_directory(db.settings)
    with connect(db.url) as conn:
        data = export_address(conn, address, directory, progress=_progress("searched"), actor=cli_actor())
    text = json.dumps(data, default=jsonable, indent=2, ensure_ascii=False) + "\n"
    with private_output(output) as out:
        out.write(text)
    counts = ", ".join(f"{len(v)} {k}" for k, v in data.items() if isinstance(v, list) and v)
    click.echo(f"privacy: exported {counts or 'nothing'}", err=True)
    return 0


@privacy.command(
    "erase",
    cls=Command,
    help=ERASE_HELP,
    short_help="anonymise EMAIL everywhere, keeping counts, timestamps and statuses",
)
@click.argument("email", metavar="EMAIL")
@click.option(
    "--suppress", is_flag=True, help="keep or put the address on the unsubscribe list (source privacy)"
)
@yes_option("do not ask; the erasure cannot be undone")
@json_option
@with_database
def erase(db: Database, email: str, suppress: bool, yes: bool, as_json: bool) -> int:
    """Erase the address once confirmed, and print what changed (as JSON with --json)."""
    from worker.ops.archive_files import archive_directory
    from worker.ops.privacy import normalise

    address = normalise(email)
    question = f"Anonymise {address} everywhere? This cannot be undone. Type 'erase' to confirm"
    refusal = "erasure cannot be undone: add --yes to confirm"
    if not yes and not confirmed_by_typing(question, "erase", refusal=refusal):
        return 1
    return _erase(db, address, archive_directory(db.settings), suppress=suppress, as_json=as_json)


def _erase(db: Database, address: str, directory: Path, *, suppress: bool, as_json: bool) -> int:
    """Erase the address and print what changed."""
    from worker.core.db import connect
    from worker.ops.audit import cli_actor
    from worker.ops.privacy import erase_address

    with connect(db.url) as conn:
        report = erase_address(
            conn,
            address,
            suppress=suppress,
            archive_dir=directory,
            progress=_progress("searched"),
            actor=cli_actor(),
        )
    if as_json:
        fields = ("replacement", "rows", "cancelled", "kept_signatures", "archive_files", "suppressed")
        click.echo(json.dumps({name: getattr(report, name) for name in fields}, indent=2))
        return 0
    click.echo(f"erased {report.address_masked}: now {report.replacement}")
    for table, rows in report.rows.items():
        if rows:
            click.echo(f"  {table}: {rows} row(s)")
    click.echo(f"  pending emails cancelled: {report.cancelled}")
    click.echo(f"  signatures kept unchanged: {report.kept_signatures}")
    if report.suppressed:
        click.echo("  on the unsubscribe list (source privacy)")
    return 0
