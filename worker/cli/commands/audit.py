"""`mailroom audit`: the audit trail of sensitive operations, newest first; `head`, `verify` and `prune` its chain."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from worker.cli.framework import (
    Command,
    Database,
    Group,
    json_option,
    number_option,
    with_database,
    yes_option,
)

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
elsewhere, and `mailroom audit prune` is the one audited way old rows leave. An application's own
rows (mailroom.app_audit, actions app.*) are listed at once and chained a little later: by the next
audit row anyone else writes, or the worker's maintenance.

--action takes a whole action (sender.suspend) or its first part (sender: every sender action).
Reading the trail changes nothing. Exit status 0, 2 when --since is not a date or time.

Examples:
  mailroom audit
  mailroom audit verify --head audit-head.json
  mailroom audit --since 2026-11-25 --action sender
  mailroom audit --action queue.cancel --limit 10 --json | jq '.[].affected'"""

HEAD = """\
Print the audit chain's head: the position of the newest audit row, its id and the hash the
chain ends with. Keep it somewhere the database's writers cannot reach (a ticket, another host,
a printout) and check later with `mailroom audit verify --head FILE`: rows deleted from the end
of the trail, or a trail rewritten from some row on, are then found even by an attacker who also
rewrote the head in the database. Changes nothing. Exit status 0.

Examples:
  mailroom audit head --json > audit-head-2026-11-25.json
  mailroom audit head --output /mnt/offsite/audit-head.txt"""

VERIFY = """\
Walk the audit trail in chain order and check every row: its hash over its own content (an
edited row), its link to the row before it (a row inserted out of chain), its position (a
removed row), and that the chain ends at the head the database keeps. With --head FILE, also
check against a head exported earlier by `mailroom audit head`: rows removed from the end (the
head is ahead of the database) or a chain rewritten since. Rows removed by retention (`mailroom
audit prune`) are not a break: the chain starts at the anchor that pruning recorded; nor are an
application's rows still waiting to be chained (counted in the summary). Reads
through a cursor (bounded memory); progress goes to standard error on long trails. Changes
nothing.

Exit status 0 when the chain is intact, 1 naming the first row edited, removed or inserted out
of chain, 2 when the head file is not one `mailroom audit head` wrote.

Examples:
  mailroom audit verify
  mailroom audit verify --head audit-head-2026-11-25.json --json"""

PRUNE = """\
Remove the audit trail's oldest rows, those written before --before (up to the first row at or
after it, so the rest stays one unbroken chain), through mailroom.audit_prune(): one
`audit.prune` row with the reason and the anchor the kept chain starts from, in one transaction.
`mailroom audit verify` still passes afterwards. Exit status 0.

Example:
  mailroom audit prune --before 2025-01-01 --reason "retention: keep two years" --yes"""


class IsoTime(click.ParamType[datetime, Any]):
    """An ISO date or time; one without a zone is UTC."""

    name = "ISO"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            when = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(
                f"not an ISO date or time: {value!r} (e.g. 2026-11-25 or 2026-11-25T08:00:00Z)", param, ctx
            )
        return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


ISO_TIME = IsoTime()


@click.group(cls=Group, help=AUDIT, invoke_without_command=True)
@number_option("--limit", default=50, help="show at most N rows (default 50)")
@click.option(
    "--since", type=ISO_TIME, metavar="ISO", help="only rows from this date or time on (UTC unless given)"
)
@click.option("--action", metavar="A", help="only this action (sender.suspend) or family of actions (sender)")
@json_option
@click.pass_context
def audit(ctx: click.Context, limit: int, since: datetime | None, action: str | None, as_json: bool) -> int:
    """`mailroom audit [--limit N] [--since ISO] [--action A] [--json]`, or one of its actions."""
    if ctx.invoked_subcommand is not None:
        return 0
    return list_trail(limit, since, action, as_json)


@with_database
def list_trail(db: Database, limit: int, since: datetime | None, action: str | None, as_json: bool) -> int:
    """Print the audit rows that match, newest first."""
    from worker.core.db import connect
    from worker.ops.audit import recent

    with connect(db.url) as conn:
        rows = recent(conn, limit, since=since, action=action)
    for row in rows:
        row["at"] = row["at"].astimezone(UTC)
    if as_json:
        click.echo(json.dumps([{**r, "at": r["at"].isoformat()} for r in rows], indent=2))
        return 0
    click.echo(format_rows(rows) if rows else "no audit rows (nothing matches, or nothing audited yet)")
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


# --- the chain ------------------------------------------------------------------------------------


@audit.command(
    "head", cls=Command, help=HEAD, short_help="print the audit chain's head to keep outside the database"
)
@click.option("--json", "as_json", is_flag=True, help="JSON, as `audit verify --head` reads it")
@click.option("-o", "--output", metavar="FILE", help="write the head to FILE instead of printing it")
@with_database
def head(db: Database, as_json: bool, output: str | None) -> int:
    """`mailroom audit head [--json] [--output FILE]`: the chain head, for keeping outside the database."""
    from worker.core.db import connect
    from worker.ops.audit_chain import export_head, head_text, read_head

    with connect(db.url) as conn:
        found, exported_at = read_head(conn)
    if found is None:
        click.echo("error: the audit chain has no head row; run: mailroom audit verify", err=True)
        return 1
    text = (
        json.dumps(export_head(found, exported_at), indent=2) + "\n"
        if as_json
        else head_text(found, exported_at)
    )
    if output is None:
        sys.stdout.write(text)
        return 0
    Path(output).write_text(text, encoding="utf-8")
    click.echo(f"audit chain head (position {found.seq}, row #{found.last_id or '-'}) written to {output}")
    return 0


def _progress(checked: int, total: int) -> None:
    share = f" of {total:,}" if total else ""
    click.echo(f"audit verify: {checked:,}{share} rows checked", err=True)


@audit.command(
    "verify",
    cls=Command,
    help=VERIFY,
    short_help="check the audit chain; name the first row edited, removed or inserted out of chain",
)
@click.option(
    "--head",
    "head_file",
    metavar="FILE",
    help="a head exported earlier by `mailroom audit head` (text or --json)",
)
@json_option
@with_database
def verify(db: Database, head_file: str | None, as_json: bool) -> int:
    """`mailroom audit verify [--head FILE] [--json]`: exit status 1 naming the first broken row."""
    from worker.core.db import connect
    from worker.ops.audit_chain import parse_exported_head, verify_chain

    exported = None
    if head_file is not None:
        exported = parse_exported_head(Path(head_file).read_text(encoding="utf-8"))
    with connect(db.url) as conn:
        report = verify_chain(conn, exported.head if exported else None, on_progress=_progress)
    if as_json:
        click.echo(json.dumps(_report_json(report, exported is not None), indent=2))
        return 0 if report.ok else 1
    click.echo(_summary(report, exported.exported_at if exported else None, exported is not None))
    for problem in report.problems[1:]:
        click.echo(f"  also {problem.text}")
    if report.more_problems:
        click.echo(f"  and {report.more_problems} more problem(s)")
    return 0 if report.ok else 1


def _summary(report: Any, exported_at: datetime | None, with_export: bool) -> str:
    span = f"positions {report.first_seq}-{report.last_seq}" if report.first_seq is not None else "no rows"
    if not report.ok:
        return f"audit chain: BROKEN: {report.problems[0].text}"
    found = report.head
    pruned = f", pruned up to position {found.pruned_seq}" if found.pruned_seq else ""
    against = ""
    if with_export:
        when = f" of {exported_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z" if exported_at else ""
        against = f"; matches the exported head{when}"
    waiting = (
        f"; {report.pending} application row(s) waiting to be chained (by the next audit write or maintenance)"
        if report.pending
        else ""
    )
    return f"audit chain: intact, {report.checked} row(s) checked ({span}{pruned}){against}{waiting}"


def _report_json(report: Any, with_export: bool) -> dict[str, Any]:
    found = report.head
    return {
        "ok": report.ok,
        "checked": report.checked,
        "first_seq": report.first_seq,
        "last_seq": report.last_seq,
        "head": None
        if found is None
        else {
            "seq": found.seq,
            "last_id": found.last_id,
            "last_hash": found.last_hash,
            "pruned_seq": found.pruned_seq,
        },
        "checked_against_export": with_export,
        "problems": [{"seq": p.seq, "id": p.id, "kind": p.kind, "text": p.text} for p in report.problems],
        "more_problems": report.more_problems,
        "pending": report.pending,
    }


@audit.command(
    "prune",
    cls=Command,
    help=PRUNE,
    short_help="remove the oldest audit rows (audited; verify still passes)",
)
@click.option(
    "--before",
    type=ISO_TIME,
    required=True,
    metavar="ISO",
    help="remove rows written before this time (UTC unless given)",
)
@click.option("--reason", required=True, help="why (kept in the audit.prune row)")
@yes_option("removed rows cannot be brought back")
@with_database
def prune(db: Database, before: datetime, reason: str, yes: bool) -> int:
    """`mailroom audit prune --before ISO --reason TEXT --yes`: the audited way old audit rows leave."""
    from worker.core.config import ConfigError
    from worker.core.db import connect
    from worker.ops.audit import cli_actor
    from worker.ops.audit_chain import prune as prune_trail

    if not yes:
        raise ConfigError("pruning the audit trail cannot be undone: add --yes to confirm")
    with connect(db.url) as conn:
        removed = prune_trail(conn, before, reason=reason, actor=cli_actor())
    click.echo(
        f"removed {removed} audit row(s) written before {before.astimezone(UTC).isoformat()};"
        " audited as audit.prune"
    )
    return 0
