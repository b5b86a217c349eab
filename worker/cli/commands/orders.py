"""`mailroom orders ingest [PATH|-]`: order events from JSON lines into the inbox, each with its email."""

from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

import click

from worker.cli.framework import Command, Database, Group, with_database

ORDERS = """\
Order events from your shop, as JSON lines, into Mailroom's inbox: each event is recorded once
under (message_id, consumer) and its email (order confirmation, completion, cancellation) is
enqueued in the same transaction, so a replayed or concurrent duplicate sends nothing twice.
`mailroom orders ingest --help` describes the lines and the result printed for each.

Examples:
  mailroom orders ingest orders.jsonl
  kafka-console-consumer --topic orders | mailroom orders ingest --consumer shop --progress"""

INGEST = """\
Read order events as JSON lines, one object per line:
  {"message_id": "...", "consumer": "...", "type": "order_placed", "payload": {...}}
Types: order_placed, order_completed, order_cancelled. The payload carries customer_email,
customer_name, order_number, total, currency, items ([{"name", "quantity", "unit_price"}];
optional for order_cancelled), and optionally locale and reason. Beside the event, a line may carry
its producer's correlation_id, traceparent and tracestate (W3C): the email keeps them and its
delivery continues that trace.
Each event is recorded in the inbox under (message_id, consumer) and its email is enqueued in
the same transaction; an event seen before creates nothing. One result line is printed per
input line: {"line": N, "email_id": ID, "duplicate": false} or {"line": N, "error": "..."}.
A rejected line changes nothing; the lines around it are kept. Exit status 0, 1 when any line was
rejected.

Examples:
  mailroom orders ingest orders.jsonl
  kafka-console-consumer --topic orders | mailroom orders ingest --consumer shop --progress"""


@click.group(cls=Group, help=ORDERS)
def orders() -> None:
    """`mailroom orders`: its actions below."""


@orders.command(
    "ingest",
    cls=Command,
    help=INGEST,
    short_help="record order events (JSON lines) and enqueue their emails exactly once",
)
@click.argument("path", default="-", required=False, metavar="[PATH]")
@click.option(
    "--consumer",
    default="mailroom",
    help="consumer name for lines that do not give one (default: mailroom); "
    "de-duplication is per (message_id, consumer)",
)
@click.option("--progress", is_flag=True, help="report progress on stderr every 1000 lines")
@with_database
def ingest(db: Database, path: str, consumer: str, progress: bool) -> int:
    """Ingest each line in its own transaction and report it."""
    from worker.core.config import ConfigError
    from worker.core.db import connect
    from worker.core.validation import ValidationError
    from worker.producers.inbox import event_trace, ingest_event, parse_event

    try:
        handle: IO[str] = (
            sys.stdin if path == "-" else open(path, encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
        )
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    counts = {"new": 0, "duplicate": 0, "rejected": 0}
    started = time.monotonic()
    with handle, connect(db.url) as conn:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            result: dict[str, Any] = {"line": number}
            try:
                try:
                    # Undecodable bytes arrive as lone surrogates (files, and stdin in most locales).
                    line.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValidationError("line", f"not valid UTF-8 (at column {exc.start + 1})") from None
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValidationError(
                        "line", f"malformed JSON: {exc.msg} at column {exc.colno}"
                    ) from None
                message_id, consumer, event_type, payload = parse_event(obj, consumer)
                trace = event_trace(obj)
                outcome = ingest_event(
                    conn, message_id, consumer, event_type, payload, settings=db.settings, trace=trace
                )
            except ValidationError as exc:
                counts["rejected"] += 1
                result.update(error=str(exc), field=exc.field)
            else:
                counts["duplicate" if outcome.duplicate else "new"] += 1
                result.update(email_id=outcome.email_id, duplicate=outcome.duplicate)
            click.echo(json.dumps(result))
            if progress and number % 1000 == 0:
                click.echo(f"ingest: {number} lines read", err=True)
    elapsed = time.monotonic() - started
    click.echo(
        f"ingest: {counts['new']} new, {counts['duplicate']} duplicate, {counts['rejected']} rejected"
        f" in {elapsed:.2f}s",
        err=True,
    )
    return 1 if counts["rejected"] else 0
