"""`mailroom privacy export|erase EMAIL`: answer access and erasure requests for one address."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.core.config import ConfigError, Settings
from worker.ops.audit import cli_actor

EXPORT_HELP = """\
Write everything stored about EMAIL as one JSON document: its emails (queued, and archived in any
final state: sent, failed, expired, cancelled, suppressed), every delivery attempt, opens, clicks,
tracked links, unsubscribe and bounce entries, inbox events, document signers, signatures and
reminders, accounts and people rows. Written to standard output, or to --output (created with mode
0600). The export is recorded in the audit trail (action privacy.export, your OS user, the address
masked, how many rows). Nothing is changed or erased. Exit status 0, 2 when EMAIL is not an address.

Examples:
  mailroom privacy export ada@example.com -o ada-export.json
  mailroom privacy export ada@example.com | jq '.emails | length'"""

ERASE_HELP = """\
Anonymise EMAIL everywhere, in one transaction, archive files of every final state included (sent,
failed, expired, cancelled, suppressed): the address becomes erased-<random>@erased.invalid; names,
subjects, bodies, template data, IP addresses and user agents are cleared. Counts, timestamps and
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
            print(f"privacy: {verb} {done}/{total} archive files", file=sys.stderr, flush=True)

    return report


def cmd_privacy(args: argparse.Namespace, settings: Settings) -> int:
    """Run an export or an erasure."""
    from worker.ops.archive_files import archive_directory
    from worker.ops.privacy import normalise

    address = normalise(args.email)
    directory = archive_directory(settings)
    if args.privacy_command == "export":
        return _export(args, settings, address, directory)
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError("erasure cannot be undone: add --yes to confirm")
        answer = input(f"Anonymise {address} everywhere? This cannot be undone. Type 'erase' to confirm: ")
        if answer.strip() != "erase":
            print("nothing changed", file=sys.stderr)
            return 1
    return _erase(args, settings, address, directory)


def _export(args: argparse.Namespace, settings: Settings, address: str, directory: Path) -> int:
    """Write the export to stdout or --output; its audit row is committed with it."""
    from worker.core.db import connect, database_url
    from worker.ops.privacy import export_address, jsonable

    with connect(database_url(settings)) as conn:
        data = export_address(conn, address, directory, progress=_progress("searched"), actor=cli_actor())
    text = json.dumps(data, default=jsonable, indent=2, ensure_ascii=False) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        try:
            fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            raise ConfigError(f"cannot write {args.output}: {exc.strerror}") from None
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    counts = ", ".join(f"{len(v)} {k}" for k, v in data.items() if isinstance(v, list) and v)
    print(f"privacy: exported {counts or 'nothing'}", file=sys.stderr)
    return 0


def _erase(args: argparse.Namespace, settings: Settings, address: str, directory: Path) -> int:
    """Erase the address and print what changed (as JSON with --json)."""
    from worker.core.db import connect, database_url
    from worker.ops.privacy import erase_address

    with connect(database_url(settings)) as conn:
        report = erase_address(
            conn,
            address,
            suppress=args.suppress,
            archive_dir=directory,
            progress=_progress("searched"),
            actor=cli_actor(),
        )
    if args.json:
        fields = ("replacement", "rows", "cancelled", "kept_signatures", "archive_files", "suppressed")
        print(json.dumps({name: getattr(report, name) for name in fields}, indent=2))
        return 0
    print(f"erased {report.address_masked}: now {report.replacement}")
    for table, rows in report.rows.items():
        if rows:
            print(f"  {table}: {rows} row(s)")
    print(f"  pending emails cancelled: {report.cancelled}")
    print(f"  signatures kept unchanged: {report.kept_signatures}")
    if report.suppressed:
        print("  on the unsubscribe list (source privacy)")
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom privacy export|erase`."""
    parser = sub.add_parser(
        "privacy",
        help="export or erase everything stored about an email address",
        description=PRIVACY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="privacy_command", required=True, metavar="ACTION")
    export = actions.add_parser(
        "export",
        help="write everything stored about EMAIL as JSON",
        description=EXPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument("email", metavar="EMAIL")
    export.add_argument("-o", "--output", help="file to write (mode 0600) instead of standard output")
    export.set_defaults(handler=cmd_privacy)
    erase = actions.add_parser(
        "erase",
        help="anonymise EMAIL everywhere, keeping counts, timestamps and statuses",
        description=ERASE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    erase.add_argument("email", metavar="EMAIL")
    erase.add_argument(
        "--suppress",
        action="store_true",
        help="keep or put the address on the unsubscribe list (source privacy)",
    )
    erase.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    erase.add_argument("--json", action="store_true", help="machine-readable report")
    erase.set_defaults(handler=cmd_privacy)
