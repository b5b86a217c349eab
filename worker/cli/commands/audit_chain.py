"""`mailroom audit head|verify|prune`: the audit trail's hash chain, its head kept outside the database, and retention."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from worker.core.config import Settings

RAW = argparse.RawDescriptionHelpFormatter

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
audit prune`) are not a break: the chain starts at the anchor that pruning recorded. Reads
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


def cmd_head(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom audit head [--json] [--output FILE]`: the chain head, for keeping outside the database."""
    from worker.core.db import checked_url, connect
    from worker.ops.audit_chain import export_head, head_text, read_head

    with connect(checked_url(settings)) as conn:
        head, exported_at = read_head(conn)
    if head is None:
        print("error: the audit chain has no head row; run: mailroom audit verify", file=sys.stderr)
        return 1
    text = (
        json.dumps(export_head(head, exported_at), indent=2) + "\n"
        if args.json
        else head_text(head, exported_at)
    )
    if args.output is None:
        sys.stdout.write(text)
        return 0
    Path(args.output).write_text(text, encoding="utf-8")
    print(f"audit chain head (position {head.seq}, row #{head.last_id or '-'}) written to {args.output}")
    return 0


def _progress(checked: int, total: int) -> None:
    share = f" of {total:,}" if total else ""
    print(f"audit verify: {checked:,}{share} rows checked", file=sys.stderr, flush=True)


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom audit verify [--head FILE] [--json]`: exit status 1 naming the first broken row."""
    from worker.core.db import checked_url, connect
    from worker.ops.audit_chain import parse_exported_head, verify_chain

    exported = None
    if args.head is not None:
        exported = parse_exported_head(Path(args.head).read_text(encoding="utf-8"))
    with connect(checked_url(settings)) as conn:
        report = verify_chain(conn, exported.head if exported else None, on_progress=_progress)
    if args.json:
        print(json.dumps(_report_json(report, exported is not None), indent=2))
        return 0 if report.ok else 1
    print(_summary(report, exported.exported_at if exported else None, exported is not None))
    for problem in report.problems[1:]:
        print(f"  also {problem.text}")
    if report.more_problems:
        print(f"  and {report.more_problems} more problem(s)")
    return 0 if report.ok else 1


def _summary(report: Any, exported_at: datetime | None, with_export: bool) -> str:
    span = f"positions {report.first_seq}-{report.last_seq}" if report.first_seq is not None else "no rows"
    if not report.ok:
        return f"audit chain: BROKEN: {report.problems[0].text}"
    head = report.head
    pruned = f", pruned up to position {head.pruned_seq}" if head.pruned_seq else ""
    against = ""
    if with_export:
        when = f" of {exported_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z" if exported_at else ""
        against = f"; matches the exported head{when}"
    return f"audit chain: intact, {report.checked} row(s) checked ({span}{pruned}){against}"


def _report_json(report: Any, with_export: bool) -> dict[str, Any]:
    head = report.head
    return {
        "ok": report.ok,
        "checked": report.checked,
        "first_seq": report.first_seq,
        "last_seq": report.last_seq,
        "head": None
        if head is None
        else {
            "seq": head.seq,
            "last_id": head.last_id,
            "last_hash": head.last_hash,
            "pruned_seq": head.pruned_seq,
        },
        "checked_against_export": with_export,
        "problems": [{"seq": p.seq, "id": p.id, "kind": p.kind, "text": p.text} for p in report.problems],
        "more_problems": report.more_problems,
    }


def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom audit prune --before ISO --reason TEXT --yes`: the audited way old audit rows leave."""
    from worker.core.config import ConfigError
    from worker.core.db import checked_url, connect
    from worker.ops.audit import cli_actor
    from worker.ops.audit_chain import prune

    if not args.yes:
        raise ConfigError("pruning the audit trail cannot be undone: add --yes to confirm")
    with connect(checked_url(settings)) as conn:
        removed = prune(conn, args.before, reason=args.reason, actor=cli_actor())
    print(
        f"removed {removed} audit row(s) written before {args.before.astimezone(UTC).isoformat()}; audited as audit.prune"
    )
    return 0


def add_chain_commands(sub: argparse._SubParsersAction[Any], since: Any) -> None:
    """Add `audit head`, `audit verify` and `audit prune` under `mailroom audit`."""
    hd = sub.add_parser(
        "head",
        help="print the audit chain's head to keep outside the database",
        description=HEAD,
        formatter_class=RAW,
    )
    hd.add_argument("--json", action="store_true", help="JSON, as `audit verify --head` reads it")
    hd.add_argument("-o", "--output", metavar="FILE", help="write the head to FILE instead of printing it")
    hd.set_defaults(handler=cmd_head)

    vf = sub.add_parser(
        "verify",
        help="check the audit chain; name the first row edited, removed or inserted out of chain",
        description=VERIFY,
        formatter_class=RAW,
    )
    vf.add_argument(
        "--head", metavar="FILE", help="a head exported earlier by `mailroom audit head` (text or --json)"
    )
    vf.add_argument("--json", action="store_true", help="machine-readable output")
    vf.set_defaults(handler=cmd_verify)

    pr = sub.add_parser(
        "prune",
        help="remove the oldest audit rows (audited; verify still passes)",
        description=PRUNE,
        formatter_class=RAW,
    )
    pr.add_argument(
        "--before",
        type=since,
        required=True,
        metavar="ISO",
        help="remove rows written before this time (UTC unless given)",
    )
    pr.add_argument("--reason", required=True, help="why (kept in the audit.prune row)")
    pr.add_argument("--yes", action="store_true", help="confirm: removed rows cannot be brought back")
    pr.set_defaults(handler=cmd_prune)
