"""`mailroom audit`: the audit trail of sensitive operations, newest first (its chain: `audit_chain`)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from worker.cli.argtypes import positive_count
from worker.cli.commands.audit_chain import add_chain_commands
from worker.core.config import Settings

AUDIT = """\
List the audit trail, newest first: every sensitive operation (a sender account added, paused,
suspended or resumed; email retried or cancelled; secrets re-encrypted by `mailroom keys rotate`;
personal data exported or erased; signature maintenance), with when it happened (UTC), the database
role that did it, who asked (the OS user of the command line, console:<user> from the console), the
action, what it was done to, how many rows it changed, and its detail.

The trail is append-only: the database refuses to change or delete its rows. A row is written in
the same transaction as the change it records, so an operation that failed left none. Every row is
hash-chained to the one before it: `mailroom audit verify` finds a row edited or removed behind the
database's back (as a superuser could), `mailroom audit head` exports the chain's head to keep
elsewhere, and `mailroom audit prune` is the one audited way old rows leave.

--action takes a whole action (sender.suspend) or its first part (sender: every sender action).
Reading the trail changes nothing. Exit status 0, 2 when --since is not a date or time.

Examples:
  mailroom audit
  mailroom audit verify --head audit-head.json
  mailroom audit --since 2026-11-25 --action sender
  mailroom audit --action queue.cancel --limit 10 --json | jq '.[].affected'"""


def _since(text: str) -> datetime:
    """An ISO date or time; one without a zone is UTC."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO date or time: {text!r} (e.g. 2026-11-25 or 2026-11-25T08:00:00Z)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom audit [--limit N] [--since ISO] [--action A] [--json]`."""
    from worker.core.db import checked_url, connect
    from worker.ops.audit import recent

    with connect(checked_url(settings)) as conn:
        rows = recent(conn, args.limit, since=args.since, action=args.action)
    for row in rows:
        row["at"] = row["at"].astimezone(UTC)
    if args.json:
        print(json.dumps([{**r, "at": r["at"].isoformat()} for r in rows], indent=2))
        return 0
    print(format_rows(rows) if rows else "no audit rows (nothing matches, or nothing audited yet)")
    return 0


def format_rows(rows: list[dict[str, Any]]) -> str:
    """One line per audit row under a heading, the short columns aligned to their widest value."""
    from worker.ops.audit import describe

    cells = [
        (
            f"{r['at']:%Y-%m-%d %H:%M:%S}",
            _printable(r["db_role"]),
            _printable(r["actor"]),
            str(r["action"]),
            str(r["affected"]),
            _printable(r["target"] or "-"),
            describe(r["detail"]),
        )
        for r in rows
    ]
    heading = ("WHEN (UTC)", "DB ROLE", "ACTOR", "ACTION", "COUNT", "TARGET", "DETAIL")
    widths = [max(len(c[i]) for c in [heading, *cells]) for i in range(6)]
    lines = []
    for line in [heading, *cells]:
        fixed = [
            cell.rjust(width) if i == 4 else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=False))
        ]
        lines.append("  ".join([*fixed, line[6]]).rstrip())
    return "\n".join(lines)


def _printable(text: str) -> str:
    """A value on one line, control characters (a newline, a terminal escape) shown as `?`."""
    return "".join(c if c.isprintable() else "?" for c in text)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom audit`."""
    parser = sub.add_parser(
        "audit",
        help="list the audit trail of sensitive operations",
        description=AUDIT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--limit", type=positive_count, default=50, metavar="N", help="show at most N rows (default 50)"
    )
    parser.add_argument(
        "--since", type=_since, metavar="ISO", help="only rows from this date or time on (UTC unless given)"
    )
    parser.add_argument(
        "--action", metavar="A", help="only this action (sender.suspend) or family of actions (sender)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=cmd_audit)
    chain = parser.add_subparsers(dest="audit_command", metavar="{head,verify,prune}")
    add_chain_commands(chain, _since)
