"""`mailroom my`: the email the connected database role enqueued, and what became of it.

What an application role (`mailroom db grant app`) may read: `mailroom.my_emails`, its own rows only.
"""

from __future__ import annotations

import json
from typing import Any

import click

from worker.cli.framework import Command, Database, json_option, number_option, with_database
from worker.cli.table import table

DESCRIPTION = """\
Show the email the database role you connect as enqueued (the view mailroom.my_emails), newest
first: id, status, recipient, subject, idempotency key, when it was sent or last failed, and why.
An application role made by `mailroom db grant app` may run it; it sees its own email only.
Suppressed email says that the address is on the suppression list (and why only to a role that
may read that list). Exit status 0, 1 when an id or key asked for is not this role's.

Examples:
  mailroom my                          the 20 newest
  mailroom my 4711 4712                those two
  mailroom my --key order-42-received  the email enqueued with that idempotency key
  mailroom my --status failed --json   the failed ones, as JSON"""

_SELECT = (
    "SELECT id, status, recipient_email, subject, idempotency_key, reference_type, reference_id,"
    " created_at, sent_at, finished_at, retry_count, max_retries, next_retry_at, last_error, suppression_reason"
    " FROM mailroom.my_emails"
    " WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))"
    " AND (%(key)s::text IS NULL OR idempotency_key = %(key)s)"
    " AND (%(status)s::text IS NULL OR status = %(status)s)"
    " ORDER BY id DESC LIMIT %(limit)s"
)
_STATUSES = ("unrendered", "pending", "assigned", "sent", "failed", "cancelled", "suppressed", "bounced")


@click.command(cls=Command, help=DESCRIPTION)
@click.argument("ids", nargs=-1, type=click.IntRange(min=1), metavar="[ID]...")
@click.option("--key", default=None, help="the email enqueued with this idempotency key")
@click.option("--status", type=click.Choice(_STATUSES), default=None, help="only email in this state")
@number_option("--limit", default=20, show_default=True, help="at most this many, newest first")
@json_option
@with_database
def my(
    db: Database, ids: tuple[int, ...], key: str | None, status: str | None, limit: int, as_json: bool
) -> int:
    """`mailroom my [ID]... [--key KEY] [--status STATUS] [--limit N] [--json]`."""
    from worker.core.db import connect

    asked = list(ids) or None
    with connect(db.url) as conn:
        rows: list[dict[str, Any]] = conn.execute(
            _SELECT,
            {"ids": asked, "key": key, "status": status, "limit": max(limit, len(ids))},
        ).fetchall()
    missing = sorted(set(ids) - {row["id"] for row in rows}) + ([key] if key and not rows else [])
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
    elif rows:
        for line in table(
            ("id", "status", "recipient", "subject", "key", "when", "why"),
            [
                (
                    str(r["id"]),
                    r["status"],
                    r["recipient_email"],
                    r["subject"] or "",
                    r["idempotency_key"] or "",
                    _when(r),
                    r["last_error"] or r["suppression_reason"] or "",
                )
                for r in rows
            ],
            right=frozenset({0}),
        ):
            click.echo(line)
    else:
        click.echo("no email of this role matches", err=True)
    for name in missing:
        click.echo(f"not an email of this role: {name}", err=True)
    return 1 if missing else 0


def _when(row: dict[str, Any]) -> str:
    """When it was sent, ended, or will be retried; else when it was enqueued."""
    for label, column in (("sent", "sent_at"), ("ended", "finished_at"), ("retry", "next_retry_at")):
        if row[column] is not None:
            return f"{label} {row[column]:%Y-%m-%d %H:%M:%S}"
    return f"enqueued {row['created_at']:%Y-%m-%d %H:%M:%S}"
