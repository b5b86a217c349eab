"""`mailroom bounces list`: the bounces and complaints recorded, newest first, with full addresses."""

from __future__ import annotations

import argparse
import json
from datetime import UTC
from typing import Any

from worker.cli.argtypes import positive_count
from worker.cli.table import table
from worker.core.config import Settings

LIST = """\
List the bounces and complaints the intake recorded (from DSNs, feedback-loop reports, a bounce
mailbox or provider webhooks), newest first: when (UTC), kind (hard, soft, complaint), the
recipient in full, the reported status, the sender account and campaign the email counts against,
the email's id, where the report came from and its diagnostic. Logs and the complaint digest
mask addresses; this is where an operator sees them. A complaint marked `told` was in a digest.

Exit status: 0 listed (an empty list too).

Examples:
  mailroom bounces list
  mailroom bounces list --kind complaint --sender newsletters
  mailroom bounces list --campaign spring-sale --json | jq -r '.[].recipient'
"""


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    """Print the newest bounce events."""
    from worker.core.db import checked_url, connect
    from worker.producers.bounces.history import list_events

    with connect(checked_url(settings)) as conn:
        rows = list_events(conn, limit=args.limit, kind=args.kind, sender=args.sender, campaign=args.campaign)
    items = [_item(r) for r in rows]
    if args.json:
        print(json.dumps(items, indent=2))
    elif not items:
        print("no bounce or complaint recorded" + (" matches" if _filtered(args) else ""))
    else:
        print("\n".join(table(HEADERS, [_cells(i) for i in items], right=frozenset({0}))))
    return 0


HEADERS = (
    "id",
    "received (UTC)",
    "kind",
    "recipient",
    "status",
    "sender",
    "campaign",
    "email",
    "source",
    "diagnostic",
)


def _item(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "received_at": r["received_at"].astimezone(UTC).isoformat(),
        "kind": r["kind"],
        "recipient": r["recipient"],
        "status": r["status"],
        "action": r["action"],
        "sender": r["sender"],
        "campaign": r["campaign_id"],
        "email_id": r["email_id"],
        "source": r["source"],
        "diagnostic": r["diagnostic"],
        "told_in_digest": r["digest_id"],
    }


def _cells(i: dict[str, Any]) -> tuple[str, ...]:
    return (
        str(i["id"]),
        i["received_at"][:19].replace("T", " "),
        i["kind"] + (" (told)" if i["told_in_digest"] else ""),
        i["recipient"],
        i["status"] or "-",
        i["sender"] or "-",
        i["campaign"] or "-",
        str(i["email_id"] or "-"),
        i["source"],
        " ".join((i["diagnostic"] or "").split())[:80],
    )


def _filtered(args: argparse.Namespace) -> bool:
    return any((args.kind, args.sender, args.campaign))


def add_list(actions: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom bounces list`."""
    parser = actions.add_parser(
        "list",
        help="list the bounces and complaints recorded",
        description=LIST,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kind", choices=("hard", "soft", "complaint"), help="only this kind")
    parser.add_argument(
        "--sender", metavar="NAME", help="only those of email sent through this sender account"
    )
    parser.add_argument("--campaign", metavar="ID", help="only those of this campaign's email")
    parser.add_argument(
        "--limit", type=positive_count, default=50, metavar="N", help="show at most N (default 50)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=cmd_list)
