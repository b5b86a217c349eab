"""`mailroom health [--json]`: exit status 0 when the queue is healthy, 1 with the reasons when not."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from worker.core.config import Settings

DESCRIPTION = """\
Check the email queue and exit non-zero, saying why, when:
  - more email is pending (due now or being sent) than MAILROOM_HEALTH_MAX_PENDING (default 10000),
  - the oldest pending email has waited longer than MAILROOM_HEALTH_MAX_OLDEST_PENDING_SECONDS
    (default 3600),
  - nothing was sent for MAILROOM_HEALTH_MAX_IDLE_SECONDS (default 900) while email has been
    pending for longer than MAILROOM_HEALTH_IDLE_GRACE_SECONDS (default 60): a fresh email after a
    quiet spell gets that long to go out before it counts,
  - email is due and no sender can send it (each sender is named with its state and reason),
  - a sender is unreachable (its relay failed; its circuit is open) while email is due,
  - more than MAILROOM_HEALTH_MAX_ATTEMPT_FAILURE_RATE (0.25) of the attempts of the last
    MAILROOM_HEALTH_FAILURE_WINDOW_SECONDS (900) failed, once there were at least
    MAILROOM_HEALTH_MIN_ATTEMPTS (20),
  - email is due and no worker has been alive for a minute,
  - or the database cannot be reached.
One line per reason. Exit status: 0 healthy, 1 unhealthy. Suitable for monitoring probes.

Reading the figures changes nothing.

Examples:
  mailroom health
  mailroom health --json | jq .reasons"""


def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    """Print the figures and any reasons; return 1 when unhealthy."""
    import psycopg

    from worker.core.db import connect, database_url
    from worker.ops.health import check_health

    try:
        with connect(database_url(settings), autocommit=True) as conn:
            report = check_health(conn, settings)
    except psycopg.OperationalError as exc:
        reason = f"database unreachable: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
        if args.json:
            print(json.dumps({"ok": False, "reasons": [reason]}, indent=2))
        else:
            print(f"unhealthy: {reason}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0 if report.ok else 1
    oldest = report.oldest_pending_seconds
    since = report.seconds_since_last_send
    print(
        f"pending {report.pending}  oldest pending {'-' if oldest is None else f'{oldest:.0f}s'}"
        f"  last sent {'never' if since is None else f'{since:.0f}s ago'}"
    )
    for warning in report.warnings:  # at risk, not failing: shown, never the exit status
        print(f"warning: {warning}", file=sys.stderr)
    if report.ok:
        print("healthy")
        return 0
    for reason in report.reasons:
        print(f"unhealthy: {reason}", file=sys.stderr)
    return 1


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom health`."""
    parser = sub.add_parser(
        "health",
        help="check the queue; exit non-zero with the reasons when it is unhealthy",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.set_defaults(handler=cmd_health)
