"""`mailroom bounces list`: the bounces, complaints and other suppressions recorded, newest first, in full."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import click

from worker.cli.framework import Command, Database, json_option, number_option, with_database

LIST = """\
List every bounce, complaint and suppression recorded, newest first, however it arrived: a relay's
refusal during the SMTP session (source smtp), DSNs, feedback-loop reports, a bounce mailbox,
provider webhooks, unsubscribes and operators' changes (`mailroom suppressions`), lifts included:
when (UTC), kind (hard, soft, complaint, unsubscribe, manual), the change (reported, listed,
lifted), the recipient in full, the reported status, the sender account and campaign the email
counts against, the email's id, the source and the diagnostic or reason. Logs and the complaint
digest mask addresses; this is where an operator sees them. A complaint marked `told` was in a
digest. One address's history: `mailroom suppressions history ADDRESS`.

Exit status: 0 listed (an empty list too).

Examples:
  mailroom bounces list
  mailroom bounces list --kind complaint --sender newsletters
  mailroom bounces list --campaign spring-sale --json | jq -r '.[].recipient'
"""


@click.command("list", cls=Command, help=LIST, short_help="list the bounces and complaints recorded")
@click.option(
    "--kind",
    type=click.Choice(("hard", "soft", "complaint", "unsubscribe", "manual")),
    help="only this kind",
)
@click.option("--sender", metavar="NAME", help="only those of email sent through this sender account")
@click.option("--campaign", metavar="ID", help="only those of this campaign's email")
@number_option("--limit", default=50, help="show at most N (default 50)")
@json_option
@with_database
def list_bounces(
    db: Database, kind: str | None, sender: str | None, campaign: str | None, limit: int, as_json: bool
) -> int:
    """Print the newest bounce events."""
    from worker.cli.table import table
    from worker.core.db import connect
    from worker.producers.bounces.history import list_events

    with connect(db.url) as conn:
        rows = list_events(conn, limit=limit, kind=kind, sender=sender, campaign=campaign)
    items = [_item(r) for r in rows]
    if as_json:
        click.echo(json.dumps(items, indent=2))
    elif not items:
        click.echo("no bounce or complaint recorded" + (" matches" if any((kind, sender, campaign)) else ""))
    else:
        click.echo("\n".join(table(HEADERS, [_cells(i) for i in items], right=frozenset({0}))))
    return 0


HEADERS = (
    "id",
    "received (UTC)",
    "kind",
    "change",
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
        "change": r["change"],
        "recipient": r["recipient"],
        "status": r["status"],
        "action": r["action"],
        "sender": r["sender"],
        "campaign": r["campaign_id"],
        "email_id": r["email_id"],
        "source": r["source"],
        "diagnostic": r["diagnostic"],
        "told_in_digest": r["digest_id"],
        "actor": r["actor"],
    }


def _cells(i: dict[str, Any]) -> tuple[str, ...]:
    return (
        str(i["id"]),
        i["received_at"][:19].replace("T", " "),
        i["kind"] + (" (told)" if i["told_in_digest"] else ""),
        i["change"],
        i["recipient"],
        i["status"] or "-",
        i["sender"] or "-",
        i["campaign"] or "-",
        str(i["email_id"] or "-"),
        i["source"],
        " ".join((i["diagnostic"] or "").split())[:80],
    )
