"""`mailroom maintenance run [--dry-run]`: retention and partition upkeep on demand."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from worker.cli.framework import Command, Database, Group, json_option, with_database

if TYPE_CHECKING:
    from worker.ops.maintenance_report import MaintenanceReport

DESCRIPTION = """\
Run every maintenance step once (the worker also runs them by itself, hourly by default):
  archive_<state>    email in a final state older than that state's age is written to gzip JSON
                     lines, one file per state and UTC day in MAILROOM_ARCHIVE_DIR (default
                     $MAILROOM_HOME/archive), read back, and only then deleted from the queue:
                       sent        MAILROOM_ARCHIVE_AFTER_DAYS (default 90), by sent_at,
                                   emails-YYYY-MM-DD.jsonl.gz
                       failed      MAILROOM_ARCHIVE_FAILED_AFTER_DAYS (default 30), by finished_at,
                                   emails-failed-YYYY-MM-DD.jsonl.gz
                       expired     failed by the queue lifetime: MAILROOM_ARCHIVE_EXPIRED_AFTER_DAYS
                                   (default 30), emails-expired-YYYY-MM-DD.jsonl.gz
                       cancelled   MAILROOM_ARCHIVE_CANCELLED_AFTER_DAYS (default 7)
                       suppressed  MAILROOM_ARCHIVE_SUPPRESSED_AFTER_DAYS (default 7)
                     Each record holds the whole email (final status and last error included) and
                     its tracked links. Pending and assigned email is never touched.
  purge_inbox        inbox rows older than MAILROOM_INBOX_RETENTION_DAYS (default 30)
  create_partitions  monthly send_logs / open_events / click_events partitions through
                     MAILROOM_PARTITIONS_AHEAD_MONTHS (default 3) ahead; rows of such a month
                     already in the default partition are moved into the new one
  drop_partitions    partitions that ended more than MAILROOM_LOG_RETENTION_MONTHS (default 24) ago;
                     send logs are first written to send-logs-YYYY-MM.jsonl.gz and read back (a
                     month whose file cannot be written stays in the database)
  expire_archives    archive files whose period ended more than MAILROOM_ARCHIVE_RETENTION_DAYS
                     (default 2557: 7 years) ago are overwritten with zeros and deleted
Each step reports how many rows it touched, and a retention summary says per final state how many
rows were due, archived and deleted. Interrupting a run loses nothing: the next run completes it.
Pending and assigned email is never touched. Exit status 0, 1 when a step reported an error.

Examples:
  mailroom maintenance run --dry-run
  mailroom maintenance run --json | jq .steps"""

GROUP = """\
Retention and partition upkeep on demand: the same steps the worker runs by itself, hourly by
default. `mailroom maintenance run --help` lists each step and the settings that steer it.

Examples:
  mailroom maintenance run --dry-run
  mailroom maintenance run"""


@click.group(cls=Group, help=GROUP)
def maintenance() -> None:
    """`mailroom maintenance`: its actions below."""


@maintenance.command("run", cls=Command, help=DESCRIPTION, short_help="run every maintenance step once")
@click.option("--dry-run", is_flag=True, help="count what each step would touch; change nothing")
@json_option
@with_database
def run(db: Database, dry_run: bool, as_json: bool) -> int:
    """Run maintenance once and print what each step did."""
    from worker.core.db import connect
    from worker.ops.retention import run_maintenance

    def progress(text: str) -> None:
        click.echo(f"maintenance: {text}", err=True)

    with connect(db.url, autocommit=True) as conn:
        report = run_maintenance(conn, db.settings, dry_run=dry_run, progress=progress)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    elif report.skipped:
        click.echo(f"maintenance skipped: {report.skipped}")
    else:
        for step in report.steps:
            verb = "would touch" if report.dry_run else "touched"
            click.echo(f"{step.name}: {verb} {step.rows} row(s)")
            for detail in step.details:
                click.echo(f"  {detail}")
        _print_retention(report)
    for error in report.errors:
        click.echo(f"error: {error}", err=True)
    return 1 if report.errors else 0


def _print_retention(report: MaintenanceReport) -> None:
    """One line per final state: its age, and how many rows were due, archived and deleted."""
    click.echo("retention (dry run: nothing archived or deleted):" if report.dry_run else "retention:")
    for name, counts in report.retention.items():
        click.echo(
            f"  {name:<10} older than {counts.age_days} day(s): {counts.due} due,"
            f" {counts.archived} archived, {counts.deleted} deleted"
        )
