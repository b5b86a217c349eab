"""`mailroom dmarc ingest|report`: DMARC aggregate reports (RFC 7489 rua) taken in and read back."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import click

from worker.cli.framework import (
    Command,
    Database,
    Group,
    json_option,
    number_option,
    with_database,
    with_settings,
)

if TYPE_CHECKING:
    from worker.core.config import Settings

EX_TEMPFAIL = 75  # sysexits.h: the database cannot be reached; an MTA pipe keeps the message

DMARC = """\
DMARC aggregate reports (RFC 7489, "rua") are what Gmail, Outlook.com, Yahoo and other mailbox
providers send daily about mail that used your domains in From: which addresses sent it, and
whether DKIM and SPF passed aligned with the From domain. Publish
`rua=mailto:dmarc@<your bounce domain>` in each sender domain's DMARC record: the bounce receiver
and the bounce mailbox poll then take them in; `ingest` reads one from a file. `report` shows
pass and fail by source and flags the sources failing alignment for a sender's From domain.

Examples:
  mailroom dmarc ingest 'google.com!example.com!1700006400!1700092799.zip'
  mailroom dmarc report --since 2026-01-01 --domain example.com
"""

INGEST = """\
Read one DMARC aggregate report from FILE, or from standard input when FILE is - or missing: the
XML, the XML gzipped (.xml.gz) or zipped (.zip), or the whole email a provider sent with such an
attachment. The report is parsed offline (nothing is looked up in DNS or fetched) and stored once
per reporting organisation and report id: the same report again changes nothing. A report whose
domain is not the From domain of a sender account (or a parent of one) is refused on its header,
before its records are read, as is one that is malformed, over a size cap (10 MiB in, 32 MiB of
XML, 50,000 records, one file per zip, no archive inside an archive) or carries a DOCTYPE or ENTITY
declaration; so is one past the bounds on what is stored (MAILROOM_DMARC_MAX_RECORDS in all,
MAILROOM_DMARC_ORG_DAILY_MAX per reporting organisation a day), and one with the organisation and
id of a stored report but other content (the stored one is then marked disputed). The reason is
printed and nothing is stored.

Exit status: 0 stored, or seen before; 1 refused (nothing stored); 2 bad usage (no such FILE); 4
the database's schema is not this Mailroom's; 75 (EX_TEMPFAIL) the database cannot be reached.

Examples:
  mailroom dmarc ingest report.xml
  mailroom dmarc ingest 'protection.outlook.com!example.com!1700006400!1700092800.xml.gz'
  mailroom dmarc ingest - < report-from-google.eml
"""

REPORT = """\
Show what the DMARC reports ending since --since (default: the last 30 days) say, per From domain
and source address: messages, how many passed DMARC, how many had DKIM and SPF aligned, how many
the providers quarantined or rejected, and who reported them. Sources with the most failed
messages come first. A source is flagged FAILING when mail in the name of a sender account's From
domain came from it and failed alignment: an unknown service sending as you, or one of yours
missing a DKIM key or an SPF include. Reports are unauthenticated claims (anyone can mail one in
any reporter's name): a source is marked DISPUTED when one of its reports was contradicted by
another with the same organisation and id. Text from the reports is printed with control
characters escaped.

Exit status: 0 shown (an empty report too).

Examples:
  mailroom dmarc report
  mailroom dmarc report --since 2026-01-01 --domain example.com
  mailroom dmarc report --json | jq '.[] | select(.flagged)'
"""


@click.group(cls=Group, help=DMARC)
def dmarc() -> None:
    """`mailroom dmarc`: its actions below."""


@dmarc.command("ingest", cls=Command, help=INGEST, short_help="read one DMARC aggregate report")
@click.argument("file", default="-", required=False, metavar="[FILE|-]")
@with_settings
def ingest(settings: Settings, file: str) -> int:
    """Parse one report and store it, or say why not."""
    import psycopg

    from worker.core.db import checked_url
    from worker.core.terminal import printable
    from worker.producers.dmarc import DEFAULT_LIMITS, ReportRefused
    from worker.producers.dmarc.intake import take_report
    from worker.producers.dmarc.store import Bounds

    # The schema first (exit 4), but not by @with_database: an unreachable database exits 75.
    try:
        url = checked_url(settings)
    except psycopg.Error as exc:
        return _unreachable(exc)
    data = _read(file, DEFAULT_LIMITS.input_bytes)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            stored = take_report(conn, data, "cli", Bounds.from_settings(settings))
    except ReportRefused as exc:
        click.echo(printable(f"error: report refused, nothing stored: {exc}"), err=True)
        return 1
    except psycopg.Error as exc:
        return _unreachable(exc)
    click.echo(printable(stored.summary()))
    return 0


def _unreachable(exc: Exception) -> int:
    click.echo(f"error: report not stored, try again later: {str(exc).splitlines()[0]}", err=True)
    return EX_TEMPFAIL


def _read(path: str, cap: int) -> bytes:
    """At most `cap` + 1 bytes: a longer input is refused by the cap, never read whole."""
    if path == "-":
        return sys.stdin.buffer.read(cap + 1)
    try:
        with open(path, "rb") as handle:
            return handle.read(cap + 1)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="FILE") from None


@dmarc.command("report", cls=Command, help=REPORT, short_help="pass and fail by source and alignment")
@click.option("--since", type=click.DateTime(formats=["%Y-%m-%d"]), metavar="DATE", help="YYYY-MM-DD (UTC)")
@click.option("--domain", metavar="DOMAIN", help="only this From (or policy) domain")
@number_option("--limit", default=500, help="show at most N sources (default 500)")
@json_option
@with_database
def report(db: Database, since: datetime | None, domain: str | None, limit: int, as_json: bool) -> int:
    """Print the pass/fail summary by domain and source."""
    from worker.cli.table import table
    from worker.core.db import connect
    from worker.ops.dmarc_report import CLAIMS, summarise

    start = since.replace(tzinfo=UTC) if since else datetime.now(UTC) - timedelta(days=30)
    with connect(db.url) as conn:
        rows = summarise(conn, start, domain, limit)
    if as_json:
        click.echo(json.dumps([r.as_json() for r in rows], indent=2))
        return 0
    if not rows:
        click.echo(f"no DMARC report since {start:%Y-%m-%d}" + (f" for {domain}" if domain else ""))
        return 0
    cells = [
        (
            r.domain,
            r.source,
            f"{r.messages:,}",
            f"{r.passed:,}",
            f"{r.failed:,}",
            f"{r.dkim_aligned:,}",
            f"{r.spf_aligned:,}",
            f"{r.quarantined_or_rejected:,}",
            " ".join(f for f, on in (("FAILING", r.flagged), ("DISPUTED", r.disputed)) if on),
            r.reporters,
        )
        for r in rows
    ]
    click.echo(CLAIMS)
    click.echo("\n".join(table(HEADERS, cells, right=frozenset({2, 3, 4, 5, 6, 7}))))
    flagged = sum(r.flagged for r in rows)
    if flagged:
        click.echo(f"{flagged} source(s) failing DMARC alignment for a sender's From domain")
    disputed = sum(bool(r.disputed) for r in rows)
    if disputed:
        click.echo(
            f"{disputed} source(s) from disputed reports: another report claimed their organisation and id"
        )
    return 0


HEADERS = (
    "domain",
    "source",
    "messages",
    "passed",
    "failed",
    "dkim aligned",
    "spf aligned",
    "quarantined/rejected",
    "flag",
    "reporters",
)
