"""`mailroom archive list|verify|restore`: the archive files retention writes, kept for years."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from worker.cli.framework import (
    Command,
    Database,
    Group,
    json_option,
    private_output,
    with_database,
    with_settings,
)

if TYPE_CHECKING:
    from worker.core.config import Settings
    from worker.ops.archive_catalogue import ArchiveFile

ARCHIVE = """\
The archive files maintenance writes as email and send logs leave the database: one gzip JSON-lines
file per UTC day and final state for email (emails-[STATE-]YYYY-MM-DD.jsonl.gz, after
MAILROOM_ARCHIVE_<STATE>_AFTER_DAYS), one per month for send logs (send-logs-YYYY-MM.jsonl.gz,
as their partitions pass MAILROOM_LOG_RETENTION_MONTHS). Each has a SHA-256 checksum beside it
(NAME.sha256, the sha256sum format). They live in MAILROOM_ARCHIVE_DIR (default
$MAILROOM_HOME/archive), mode 0600; maintenance overwrites and deletes them once their period ended
MAILROOM_ARCHIVE_RETENTION_DAYS ago (default 2557: 7 years). `privacy export` and `privacy erase`
reach into them.

Examples:
  mailroom archive list
  mailroom archive verify
  mailroom archive restore --address ada@example.com -o ada.jsonl
  mailroom archive restore --period 2026-03 --kind send-logs | jq .outcome"""

LIST = """\
List the archive files: kind, period, state (email), size, and whether a checksum is beside it.
Nothing is read but the directory. Exit status 0.

Examples:
  mailroom archive list
  mailroom archive list --json | jq '.[] | select(.kind == "send-logs")'"""

VERIFY = """\
Check every archive file (or those of --period): its bytes against the checksum written with it,
then every record decompressed and parsed, no record held twice. Progress on stderr; one line per
file with a problem, then a summary. Exit status 0 when every file is whole, 1 otherwise. A file
without a checksum (written before checksums existed) is a problem: it cannot be told apart from one
altered since.

Examples:
  mailroom archive verify
  mailroom archive verify --period 2025"""

RESTORE = """\
Write the archived records of one address (--address) or one period (--period YYYY, YYYY-MM or
YYYY-MM-DD) as JSON lines, each with "archive_file" and "kind" (emails or send-logs), to standard
output or --output (created with mode 0600). The files are checked against their checksums first: a
file that does not match stops the restore (exit status 1) before any of its records is written.
Each restore is recorded in the audit trail (action archive.restore, your OS user, the address
masked or the period, how many records). Exit status 0, 2 on a malformed address or period.

Examples:
  mailroom archive restore --address ada@example.com -o ada.jsonl
  mailroom archive restore --period 2026-03-14 --kind emails"""


@click.group(cls=Group, help=ARCHIVE)
def archive() -> None:
    """`mailroom archive`: its actions below."""


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


@archive.command("list", cls=Command, help=LIST, short_help="list the archive files and their periods")
@json_option
@with_settings
def list_files(settings: Settings, as_json: bool) -> int:
    """Print one line (or JSON object) per archive file."""
    from worker.ops.archive_catalogue import catalogue
    from worker.ops.archive_files import archive_directory, checksum_path

    directory = archive_directory(settings)
    files = catalogue(directory)
    rows = [
        {
            "file": f.name,
            "kind": f.kind,
            "period": f.period,
            "state": f.state,
            "bytes": f.path.stat().st_size,
            "checksum": checksum_path(f.path).exists(),
        }
        for f in files
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return 0
    if not rows:
        click.echo(f"no archive files in {directory}")
        return 0
    click.echo(f"{'KIND':<10} {'PERIOD':<11} {'STATE':<10} {'SIZE':>10}  CHECKSUM  FILE")
    for row in rows:
        state = row["state"] or "-"
        checksum = "yes" if row["checksum"] else "MISSING"
        size = _size(int(str(row["bytes"])))
        click.echo(
            f"{row['kind']:<10} {row['period']:<11} {state:<10} {size:>10}  {checksum:<8}  {row['file']}"
        )
    total = sum(int(str(r["bytes"])) for r in rows)
    click.echo(f"{len(rows)} file(s), {_size(total)} in {directory}")
    return 0


def _selected(settings: Settings, period: str | None, kind: str = "all") -> list[ArchiveFile]:
    """The archive files of `kind` overlapping `period` (all when None); a malformed period is exit 2."""
    from worker.core.validation import ValidationError
    from worker.ops.archive_catalogue import KINDS, catalogue, overlapping, period_bounds
    from worker.ops.archive_files import archive_directory

    files = catalogue(archive_directory(settings), KINDS if kind == "all" else (kind,))
    if period is None:
        return files
    try:
        start, end = period_bounds(period)
    except ValueError as exc:
        raise ValidationError("period", str(exc)) from None
    return overlapping(files, start, end)


def _progress(verb: str) -> Callable[[int, int], None]:
    """Report on stderr about twenty times, whatever the number of files."""

    def report(done: int, total: int) -> None:
        if done == total or done % max(1, total // 20) == 0:
            click.echo(f"archive: {verb} {done}/{total} files", err=True)

    return report


PERIOD = click.option("--period", metavar="PERIOD", help="only files of YYYY, YYYY-MM or YYYY-MM-DD")


@archive.command("verify", cls=Command, help=VERIFY, short_help="check every archive file and its checksum")
@PERIOD
@with_settings
def verify(settings: Settings, period: str | None) -> int:
    """Verify the files; exit 1 when any has a problem."""
    from worker.ops.archive_catalogue import verify as verify_file

    files = _selected(settings, period)
    progress = _progress("verified")
    bad = records = 0
    for done, file in enumerate(files, start=1):
        check = verify_file(file)
        records += check.records
        if not check.ok:
            bad += 1
            click.echo(f"{file.name}: {'; '.join(check.problems)}")
        progress(done, len(files))
    click.echo(f"{len(files)} file(s), {records} record(s) read: {bad or 'no'} file(s) with a problem")
    return 1 if bad else 0


@archive.command(
    "restore", cls=Command, help=RESTORE, short_help="write one address's or one period's archived records"
)
@click.option("--address", metavar="EMAIL", help="the records naming this address")
@PERIOD
@click.option(
    "--kind",
    type=click.Choice(("all", "emails", "send-logs")),
    default="all",
    show_default=True,
    help="which archive files to read",
)
@click.option("-o", "--output", help="file to write (mode 0600) instead of standard output")
@with_database
def restore(db: Database, address: str | None, period: str | None, kind: str, output: str | None) -> int:
    """Write the records, and one audit row for the restore."""
    from worker.core.db import connect
    from worker.core.masking import mask_address
    from worker.core.validation import ValidationError
    from worker.ops import audit
    from worker.ops.archive_catalogue import records
    from worker.ops.privacy import normalise

    if (address is None) == (period is None):
        raise ValidationError("restore", "give --address EMAIL or --period PERIOD (one of them)")
    addr = normalise(address) if address is not None else None
    files = _selected(db.settings, period, kind)
    written = 0
    with connect(db.url) as conn, conn.transaction(), private_output(output) as out:
        for file, record in records(files, address=addr, progress=_progress("read")):
            out.write(json.dumps({"archive_file": file.name, "kind": file.kind, **record}) + "\n")
            written += 1
        target = mask_address(addr) if addr is not None else f"period {period}"
        detail = {"files": len(files), "kind": kind}
        audit.record(conn, "archive.restore", audit.cli_actor(), target, written, detail)
    click.echo(f"archive: {written} record(s) from {len(files)} file(s)", err=True)
    return 0
