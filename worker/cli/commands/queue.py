"""`mailroom stats`, `retry` and `cancel`: the queue as operators see and steer it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from worker.core.config import ConfigError, Settings


def _url(settings: Settings) -> str:
    from worker.core.db import checked_url

    return checked_url(settings)


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom stats [--json]`."""
    from worker.core.db import connect
    from worker.ops.stats import queue_stats

    with connect(_url(settings)) as conn:
        stats = queue_stats(conn, reputation_window=settings.health_reputation_deliveries)
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    print("queue:  " + "  ".join(f"{k} {v}" for k, v in stats["queue"].items()))
    oldest = stats["oldest_pending_seconds"]
    print(
        f"due now {stats['due_now']}  scheduled later {stats['scheduled_later']}  retrying {stats['retrying']}"
        f"  oldest pending {'-' if oldest is None else f'{oldest:.0f}s'}"
    )
    for s in stats["senders"]:
        print(
            f"sender {s['name']}: {s['status']}, {s['sent_today']}/{s['limit_today']} today, "
            f"{s['bounces_today']} bounces, {s['errors_today']} errors; {_rates(s)}"
        )
    return 0


def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom retry ID...|--all-failed`."""
    from worker.core.db import connect
    from worker.ops.actions import retry, retry_all_failed

    if not args.ids and not args.all_failed:
        raise ConfigError("give email ids or --all-failed")
    with connect(_url(settings)) as conn:
        result = retry_all_failed(conn) if args.all_failed else retry(conn, args.ids)
    print(result.summary("retried"))
    return 1 if result.skipped else 0


def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom cancel ID...`."""
    from worker.core.db import connect
    from worker.ops.actions import cancel

    with connect(_url(settings)) as conn:
        result = cancel(conn, args.ids)
    print(result.summary("cancelled"))
    return 1 if result.skipped else 0


STATS = """\
Show the queue by status, what is due now, scheduled later and retrying, the oldest pending email,
and every sender account's day so far (sent against its limit, bounces, errors, and whether its
relay is unreachable, since when and why). Changes nothing. Exit status 0.

Examples:
  mailroom stats
  mailroom stats --json | jq '.senders[] | select(.status == "unreachable")'"""

RETRY = """\
Put failed (or suppressed) emails back in the queue, due now, with their retry budget reset.
Emails in any other state are left alone and listed with their state; the exit status is then 1.
An address on the bounce or unsubscribe list is suppressed again at claim time. Each retry is
recorded in the audit trail (`mailroom audit`) with how many emails it changed.

Examples:
  mailroom retry 1201 1202
  mailroom retry --all-failed"""

CANCEL = """\
Cancel emails that are pending, failed or suppressed: they will never be sent. Emails being sent
right now, sent or already cancelled are left alone and listed; the exit status is then 1.
Each cancel is recorded in the audit trail (`mailroom audit`) with how many emails it changed.

Example:
  mailroom cancel 1201 1202"""


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom stats`, `retry` and `cancel`."""
    raw = argparse.RawDescriptionHelpFormatter
    stats = sub.add_parser(
        "stats", help="queue depth and sender usage", description=STATS, formatter_class=raw
    )
    stats.add_argument("--json", action="store_true", help="machine-readable output")
    stats.set_defaults(handler=cmd_stats)

    rt = sub.add_parser("retry", help="send failed emails again", description=RETRY, formatter_class=raw)
    rt.add_argument("ids", nargs="*", type=int, metavar="ID")
    rt.add_argument("--all-failed", action="store_true", help="retry every failed email")
    rt.set_defaults(handler=cmd_retry)

    cn = sub.add_parser(
        "cancel", help="cancel emails that are not yet sent", description=CANCEL, formatter_class=raw
    )
    cn.add_argument("ids", nargs="+", type=int, metavar="ID")
    cn.set_defaults(handler=cmd_cancel)


def _rates(sender: dict[str, Any]) -> str:
    """Hard bounces and complaints over the sender's last deliveries, as `mailroom health` judges them."""
    if not sender["deliveries"]:
        return "no deliveries yet"
    return (
        f"of its last {sender['deliveries']} deliveries {sender['hard_bounce_rate']:.1%} bounced hard,"
        f" {sender['complaint_rate']:.2%} drew complaints"
    )
