"""`mailroom ingest [PATH|-]`: order events from JSON lines into the inbox, each with its email."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import IO, Any

from worker.core.config import ConfigError, Settings

DESCRIPTION = """\
Read order events as JSON lines, one object per line:
  {"message_id": "...", "consumer": "...", "type": "order_placed", "payload": {...}}
Types: order_placed, order_completed, order_cancelled. The payload carries customer_email,
customer_name, order_number, total, currency, items ([{"name", "quantity", "unit_price"}];
optional for order_cancelled), and optionally locale and reason.
Each event is recorded in the inbox under (message_id, consumer) and its email is enqueued in
the same transaction; an event seen before creates nothing. One result line is printed per
input line: {"line": N, "email_id": ID, "duplicate": false} or {"line": N, "error": "..."}.
A rejected line changes nothing; the lines around it are kept. Exit status 0, 1 when any line was
rejected.

Examples:
  mailroom ingest orders.jsonl
  kafka-console-consumer --topic orders | mailroom ingest --consumer shop --progress"""


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest each line in its own transaction and report it."""
    from worker.core.db import connect, database_url
    from worker.core.validation import ValidationError
    from worker.producers.inbox import ingest_event, parse_event

    try:
        handle: IO[str] = (
            sys.stdin if args.path == "-" else open(args.path, encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
        )
    except OSError as exc:
        raise ConfigError(f"cannot read {args.path}: {exc.strerror}") from None
    counts = {"new": 0, "duplicate": 0, "rejected": 0}
    started = time.monotonic()
    with handle, connect(database_url(settings)) as conn:
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
                message_id, consumer, event_type, payload = parse_event(obj, args.consumer)
                outcome = ingest_event(conn, message_id, consumer, event_type, payload, settings=settings)
            except ValidationError as exc:
                counts["rejected"] += 1
                result.update(error=str(exc), field=exc.field)
            else:
                counts["duplicate" if outcome.duplicate else "new"] += 1
                result.update(email_id=outcome.email_id, duplicate=outcome.duplicate)
            print(json.dumps(result), flush=True)
            if args.progress and number % 1000 == 0:
                print(f"ingest: {number} lines read", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    print(
        f"ingest: {counts['new']} new, {counts['duplicate']} duplicate, {counts['rejected']} rejected"
        f" in {elapsed:.2f}s",
        file=sys.stderr,
    )
    return 1 if counts["rejected"] else 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom ingest`."""
    parser = sub.add_parser(
        "ingest",
        help="record order events (JSON lines) and enqueue their emails exactly once",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "path", nargs="?", default="-", help="file to read, or - for standard input (default)"
    )
    parser.add_argument(
        "--consumer",
        default="mailroom",
        help="consumer name for lines that do not give one (default: mailroom); "
        "de-duplication is per (message_id, consumer)",
    )
    parser.add_argument("--progress", action="store_true", help="report progress on stderr every 1000 lines")
    parser.set_defaults(handler=cmd_ingest)
