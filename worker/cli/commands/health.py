"""`mailroom health [--json]`: exit status 0 when the queue is healthy, 1 with the reasons when not."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from worker.cli.framework import Command, json_option, with_settings

if TYPE_CHECKING:
    from worker.core.config import Settings
    from worker.ops.health import HealthReport

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
One line per reason. Exit status: 0 healthy, 1 unhealthy (an unreachable database included), 4 the
database schema is missing or of another version. Suitable for monitoring probes.

Reading the figures changes nothing.

Examples:
  mailroom health
  mailroom health --json | jq .reasons"""


@click.command(cls=Command, help=DESCRIPTION)
@json_option
@with_settings
def health(settings: Settings, as_json: bool) -> int:
    """Print the figures and any reasons; return 1 when unhealthy."""
    import psycopg

    from worker.core.db import checked_url, connect
    from worker.core.failover import UNREACHABLE, database_unavailable, said, unavailable_reason
    from worker.ops.health import check_health

    try:
        # Not @with_database: an unreachable database is a finding of the probe (exit 1), not
        # exit 3; a schema missing or of another version still raises SchemaMismatch (exit 4).
        with connect(checked_url(settings), autocommit=True) as conn:
            report = check_health(conn, settings)
    except psycopg.Error as exc:
        if not database_unavailable(exc):
            raise
        kind = unavailable_reason(exc)
        reason = (
            f"database unreachable: {said(exc)}"
            if kind == UNREACHABLE
            else f"database unavailable ({kind}): {said(exc)}"
        )
        if as_json:
            click.echo(json.dumps({"ok": False, "reasons": [reason]}, indent=2))
        else:
            click.echo(f"unhealthy: {reason}", err=True)
        return 1
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
        return 0 if report.ok else 1
    return _show(report)


def _show(report: HealthReport) -> int:
    """The figures on stdout, warnings and reasons on stderr; the exit status."""
    oldest = report.oldest_pending_seconds
    since = report.seconds_since_last_send
    click.echo(
        f"pending {report.pending}  oldest pending {'-' if oldest is None else f'{oldest:.0f}s'}"
        f"  last sent {'never' if since is None else f'{since:.0f}s ago'}"
    )
    for warning in report.warnings:  # at risk, not failing: shown, never the exit status
        click.echo(f"warning: {warning}", err=True)
    if report.ok:
        click.echo("healthy")
        return 0
    for reason in report.reasons:
        click.echo(f"unhealthy: {reason}", err=True)
    return 1
