"""`mailroom db backup`, `db restore` and `db verify`: encrypted backups, restores, and restore drills."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from worker.cli.framework import Command, number_option, with_settings

if TYPE_CHECKING:
    from worker.core.config import Settings
    from worker.ops.backup_crypto import BackupKey

BACKUP = """\
Write a backup of the mailroom schema and its data to FILE: a pg_dump (custom format), encrypted as
it is written (AES-256-GCM, in 1 MiB chunks) with a key derived from MAILROOM_SECRET_KEY, or from
the key in --key-file PATH (a file only its owner may read: `(umask 077; mailroom keys generate >
PATH)`). Without its key a backup cannot be read: keep the key safe, and apart from the backups.
The file is written with mode 0600 under a temporary name and renamed once complete, so a failed
backup leaves nothing under FILE. --no-encrypt writes the plain pg_dump instead, for backups
encrypted elsewhere (an encrypted disk, a backup tool's own encryption). With --dir DIR the file is
DIR/mailroom-<UTC time>.dump, and --keep N then removes the oldest such files beyond N.
The archive files (email and send logs that left the database; `mailroom archive list`) are files,
not in the dump: the output names their directory and how many there are, to be copied with it.
The database is not changed.
Exit status 0, 1 when pg_dump fails, 2 when the key is missing or unfit.

Examples:
  mailroom db backup mailroom-$(date +%F).dump
  mailroom db backup --dir /var/backups/mailroom --keep 30
  mailroom db backup --key-file /etc/mailroom/backup.key mailroom.dump
  mailroom db backup --no-encrypt mailroom.dump"""

RESTORE = """\
Restore a backup made by `mailroom db backup` (encrypted or plain: its first bytes tell) into an
empty database (MAILROOM_DATABASE_URL, or the embedded one), in one transaction. An encrypted backup
is opened with MAILROOM_SECRET_KEY, or with the --key-file it was made with: it is decrypted whole
into a private temporary file (under TMPDIR, which needs room for the plain dump) and checked before
anything is restored, so a wrong key or a damaged, truncated or extended file restores nothing.
A database that already holds a mailroom schema is refused and left alone.
Exit status 0, 1 when it is refused or pg_restore fails, 2 when the key is missing or unfit.

Examples:
  MAILROOM_DATABASE_URL=postgresql://localhost/fresh mailroom db restore mailroom.dump
  mailroom db restore --key-file /etc/mailroom/backup.key mailroom.dump"""

VERIFY = """\
Check that a backup restores: open it (an encrypted one must authenticate whole with its key),
restore it into a scratch database on the same server (mailroom_verify_<random>, made from
template0, so the role needs CREATEDB), check that its schema revision is one this Mailroom knows,
count every table's rows, verify the audit trail's hash chain and, when MAILROOM_SECRET_KEY is
set, that every stored secret (SMTP passwords, DKIM keys, webhook secrets) decrypts with it, then
drop the scratch database, whatever happened (Ctrl-C and SIGTERM too). What was checked is
printed; progress goes to standard error. The database in use is not changed. Run it after every
backup you rely on: a restore drill.
Exit status 0 when every check passed, 1 when one failed, 2 when the key is missing or the role
may not create databases.

Examples:
  mailroom db verify mailroom.dump
  mailroom db verify --key-file /etc/mailroom/backup.key /var/backups/mailroom/mailroom-*.dump
  mailroom db backup --verify mailroom.dump          (back up, then verify at once)"""

FILE = click.Path(dir_okay=False, path_type=Path)
DIRECTORY = click.Path(file_okay=False, path_type=Path)
KEY_FILE_HELP = (
    "encrypt with the key in this file (mode 0600, made with `mailroom keys generate`) instead of one"
    " derived from MAILROOM_SECRET_KEY"
)


@click.command(
    "backup",
    cls=Command,
    help=BACKUP,
    short_help="write an encrypted backup of the mailroom schema and its data to FILE",
)
@click.argument("file", type=FILE, metavar="[FILE]", required=False)
@click.option(
    "--dir",
    "directory",
    type=DIRECTORY,
    metavar="DIR",
    help="write DIR/mailroom-<UTC time>.dump instead of FILE",
)
@number_option("--keep", help="with --dir: keep the newest N backups there, remove older ones")
@click.option("--key-file", type=FILE, metavar="PATH", help=KEY_FILE_HELP)
@click.option("--no-encrypt", is_flag=True, help="write a plain pg_dump (for backups encrypted elsewhere)")
@click.option("--verify", "then_verify", is_flag=True, help="then verify it as `mailroom db verify` does")
@with_settings
def backup(
    settings: Settings,
    file: Path | None,
    directory: Path | None,
    keep: int | None,
    key_file: Path | None,
    no_encrypt: bool,
    then_verify: bool,
) -> int:
    """`mailroom db backup FILE | --dir DIR [--keep N]`: any schema version may be backed up (before an
    upgrade above all), so the embedded server is not migrated first."""
    from worker.core.db import database_url
    from worker.ops import backup as backups

    if (file is None) == (directory is None):
        raise click.UsageError("give FILE or --dir DIR (one of them)")
    if keep is not None and directory is None:
        raise click.UsageError("--keep N counts the backups in --dir DIR: give --dir")
    if no_encrypt and key_file is not None:
        raise click.UsageError("--no-encrypt and --key-file exclude each other")
    key = None if no_encrypt else backups.backup_key(settings, key_file, make=None, otherwise="--no-encrypt")
    url = database_url(settings, migrate=False)
    click.echo(f"backing up to {file or directory} ...", err=True)
    if directory is not None:
        result, removed = backups.backup_into(url, directory, key, keep=keep, now=datetime.now(UTC))
    else:
        assert file is not None
        result, removed = backups.backup(url, file, key), []
    click.echo(
        f"wrote {result.path} ({result.bytes:,} bytes, {_sealing(result.key)}, PostgreSQL"
        f" {result.server_major}, {result.tool})"
    )
    if removed:
        click.echo(f"removed {len(removed)} older backup(s): " + ", ".join(p.name for p in removed))
    _name_the_archive(settings)
    return _verified(settings, url, result.path, result.key) if then_verify else 0


def _name_the_archive(settings: Settings) -> None:
    """Say where the archive files are: a backup of the database alone would lose them."""
    from worker.ops.archive_catalogue import catalogue
    from worker.ops.archive_files import archive_directory

    directory = archive_directory(settings)
    files = catalogue(directory)
    if files:
        click.echo(
            f"not in this backup: {len(files)} archive file(s) in {directory} (email and send logs that"
            " left the database); copy them with it and check the copy with `mailroom archive verify`"
        )


def _sealing(key: BackupKey | None) -> str:
    if key is None:
        return "not encrypted"
    return f"encrypted with {key.source.described}, key id {key.shown}"


@click.command("restore", cls=Command, help=RESTORE, short_help="restore a backup into an empty database")
@click.argument("file", type=FILE, metavar="FILE")
@click.option("--key-file", type=FILE, metavar="PATH", help="the backup key file it was encrypted with")
@with_settings
def restore(settings: Settings, file: Path, key_file: Path | None) -> int:
    """`mailroom db restore FILE [--key-file PATH]`: into a database without a mailroom schema."""
    from worker.core.db import database_url
    from worker.ops import backup as backups

    key = backups.restore_key(file, settings, key_file)
    click.echo(f"restoring {file} ...", err=True)
    result = backups.restore(database_url(settings, migrate=False), file, key)
    click.echo(
        f"restored {result.path} ({result.bytes:,} bytes, {_sealing(result.key)}) into PostgreSQL"
        f" {result.server_major}"
    )
    return 0


@click.command(
    "verify",
    cls=Command,
    help=VERIFY,
    short_help="restore a backup into a scratch database, check it, drop it",
)
@click.argument("file", type=FILE, metavar="FILE")
@click.option("--key-file", type=FILE, metavar="PATH", help="the backup key file it was encrypted with")
@with_settings
def verify(settings: Settings, file: Path, key_file: Path | None) -> int:
    """`mailroom db verify FILE [--key-file PATH]`: a restore drill on a scratch database."""
    from worker.core.db import database_url
    from worker.ops.backup import restore_key

    key = restore_key(file, settings, key_file)
    return _verified(settings, database_url(settings, migrate=False), file, key)


def _verified(settings: Settings, url: str, file: Path, key: BackupKey | None) -> int:
    """Verify the backup at `file`, print each check and each table's rows; exit status 0 when all held."""
    from worker.core.config import ConfigError
    from worker.core.crypto import SecretBox, secret_key
    from worker.ops.backup_verify import verify as drill

    try:  # the key in use, never made here: without one the secrets are not checked
        box: SecretBox | None = SecretBox(secret_key(settings, make=False))
    except ConfigError:
        box = None
    with _terminated_as_interrupted():
        found = drill(url, file, key, secrets_box=box, say=lambda line: click.echo(line, err=True))
    for check in found.checks:
        click.echo(f"{'ok' if check.ok else 'FAILED':<7} {check.text}")
    if found.tables:
        click.echo("rows per table:")
        width = max(len(name) for name, _ in found.tables)
        for name, rows in found.tables:
            click.echo(f"  {name:<{width}}  {rows:>12,}")
    verdict = "verified: every check passed" if found.ok else "NOT verified: a check failed"
    click.echo(f"{file}: {verdict}")
    return 0 if found.ok else 1


def snapshot_before_upgrade(
    settings: Settings, url: str, revision: str, directory: Path | None, key_file: Path | None
) -> None:
    """Write the encrypted snapshot `db upgrade` takes before it migrates, and say where it is; none for a
    fresh install (nothing to keep) or a database already at `revision` (nothing to migrate).

    A snapshot that fails stops the upgrade: `BackupError`, saying nothing was migrated."""
    from worker.core import db as database
    from worker.core.config import ConfigError
    from worker.ops import backup as backups

    current = database.current_revision(url)
    target = database.head_revision() if revision == "head" else revision
    if current is None or current == target:
        return
    key = backups.backup_key(settings, key_file, make=None, otherwise="--no-snapshot")
    folder = directory or settings.home / "backups"
    click.echo(
        f"writing a snapshot of the database at {current} into {folder} before migrating ...", err=True
    )
    try:
        result = backups.snapshot(
            url, folder, key, from_revision=current, to_revision=target, now=datetime.now(UTC)
        )
    except (backups.BackupError, ConfigError, OSError) as exc:
        raise backups.BackupError(
            f"the snapshot before migrating failed, so nothing was migrated: {exc}"
            " (`mailroom db upgrade --no-snapshot` migrates without one)"
        ) from None
    click.echo(
        f"snapshot of the database at {current}: {result.path} ({result.bytes:,} bytes,"
        f" {_sealing(result.key)}); to go back, restore it into an empty database",
        err=True,
    )


@contextlib.contextmanager
def _terminated_as_interrupted() -> Iterator[None]:
    """Within the block SIGTERM (a service stopped, a timer's timeout) unwinds like Ctrl-C, so cleanup runs."""

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set a handler
        return
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
