"""`mailroom db`: migrations, the DSN in use, the embedded server (serve, status, stop), backup and restore."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from worker.cli.commands.db_backup import (
    DIRECTORY,
    FILE,
    backup,
    restore,
    snapshot_before_upgrade,
    verify,
)
from worker.cli.framework import Command, Database, Group, with_database, with_settings

if TYPE_CHECKING:
    from worker.core.config import Settings

DESCRIPTION = """\
Migrate the schema, show the database in use, run or stop the embedded PostgreSQL, back it up.

Without MAILROOM_DATABASE_URL every command uses a private embedded PostgreSQL in
$MAILROOM_HOME/pg, started on demand and stopped when the last Mailroom process using it exits.

Examples:
  mailroom db upgrade                 migrate to the newest schema (run it against PostgreSQL
                                      itself, not through a transaction-pooling PgBouncer)
  mailroom db status                  the embedded server: pid, port, version, data directory, users
  mailroom db backup mailroom.dump    a pg_dump of the mailroom schema, encrypted (mode 0600)
  mailroom db restore mailroom.dump   into an empty database (MAILROOM_DATABASE_URL)
  mailroom db schema --check          compare the live schema with the one this version ships
  mailroom db grant app shop          let role "shop" enqueue (mailroom.enqueue) and read its own
                                      email's status (mailroom.my_emails), nothing else
  mailroom db grant read-only grafana let role "grafana" read every table but the secrets
                                      (after an upgrade, grant again: new tables need it)"""


UPGRADE = """\
Migrate the database to REVISION (default: head, the newest this version knows), one revision at a
time, each in its own transaction. Data is kept; a database already there is left alone. Run it
against PostgreSQL itself, not through a transaction-pooling PgBouncer.

First, when Mailroom is installed there and not at REVISION yet, it writes an encrypted backup (as
`mailroom db backup` does, with MAILROOM_SECRET_KEY or --key-file) to
$MAILROOM_HOME/backups/before-<from>-to-<to>-<UTC time>.dump (or into --snapshot-dir), and says
where: restore it into an empty database to go back. When the snapshot fails nothing is migrated.
A fresh install takes none; --no-snapshot takes none (back up your own way first).
Exit status 0, 1 when the snapshot fails, 2 when its key is missing, 3 when the database cannot be
reached.

Examples:
  mailroom db upgrade
  mailroom db upgrade 0005
  mailroom db upgrade --snapshot-dir /var/backups/mailroom
  mailroom db upgrade --no-snapshot"""

DOWNGRADE = """\
Migrate the database down to REVISION, undoing each later revision; 'base' removes every Mailroom
table and the data in them. Back up first (`mailroom db backup`). Other schemas are left alone.
Exit status 0, 3 when the database cannot be reached.

Examples:
  mailroom db downgrade 0005
  mailroom db downgrade base"""

CURRENT = """\
Print the revision the database is at ('base' when Mailroom is not installed). Changes nothing.
Exit status 0, 3 when the database cannot be reached.

Example:
  mailroom db current"""

URL = """\
Print the DSN Mailroom uses: MAILROOM_DATABASE_URL, or the embedded server's (started and migrated
if needed), without its password: a password on a command line (`psql "postgresql://u:pw@..."`)
is readable by every local user in `ps` and /proc, and stays in the shell history. psql and the
other client tools take the password from ~/.pgpass or the file named by PGPASSFILE (mode 0600,
`host:port:database:user:password`), or ask for it. --show-password prints the DSN whole, for a
file or a secret store, never for a command line. Exit status 0.

The embedded server runs only while a Mailroom process uses it, and this command exits at once:
keep it up with `mailroom db serve` (in another terminal, or as a service) for psql or an
application. A worker or the console keeps it up too.

Examples:
  mailroom db serve                                                in one terminal, then
  psql "$(mailroom db url)" -c 'TABLE mailroom.sender_accounts'    in another
  mailroom db url --show-password > ~/.config/mailroom/dsn    (then chmod 600 it)"""

SCHEMA = """\
Print the live mailroom schema the way migrations/schema.sql holds it, or with --check compare it
with the schema this version ships. Changes nothing.
Exit status 0, 1 when --check finds a difference (printed as a diff).

Examples:
  mailroom db schema > live.sql
  mailroom db schema --check"""

SERVE = """\
Start the embedded PostgreSQL (in $MAILROOM_HOME/pg, migrated to this version's schema), print its
DSN, and keep it running until Ctrl-C or SIGTERM, so that psql and your application can use it
(every other Mailroom command lets it stop when the last Mailroom process exits). Then this
process lets go of it: it stops unless another Mailroom process still uses it. With
MAILROOM_DATABASE_URL set there is nothing to serve: that server runs on its own.
Exit status 0 when stopped.

Examples:
  mailroom db serve                                           in one terminal
  psql "$(mailroom db url)" -c 'TABLE mailroom.email_queue'   in another"""

STATUS = """\
Say whether the embedded PostgreSQL runs: its pid, port, version, data and socket directories and
the Mailroom processes that use it. Changes nothing. Exit status 0.

Example:
  mailroom db status"""

STOP = """\
Stop the embedded PostgreSQL. Refused while other Mailroom processes use it (they are named),
unless --force. A server given by MAILROOM_DATABASE_URL is never touched.
Exit status 0 when stopped or not running, 1 when refused.

Examples:
  mailroom db stop
  mailroom db stop --force"""

GRANT = """\
Grant a database role the least it needs: `app` may enqueue (mailroom.enqueue) and read its own
email's status (mailroom.my_emails); `read-only` may read every table but the secrets. Other
privileges of the role are left alone; the grant is audited. After an upgrade, grant again.
Exit status 0, 2 when the role is missing (use --create) or its name is invalid.

Examples:
  mailroom db grant app shop --create
  mailroom db grant read-only grafana"""

SNAPSHOT_KEY_HELP = (
    "encrypt the snapshot with the key in this file (mode 0600) instead of MAILROOM_SECRET_KEY's"
)


@click.group(cls=Group, help=DESCRIPTION)
def db() -> None:
    """`mailroom db ACTION`."""


# The migration actions work on the schema itself, so they never ask for it at this version.


@db.command("upgrade", cls=Command, help=UPGRADE, short_help="migrate to a revision (default: head)")
@click.argument("revision", default="head")
@click.option(
    "--snapshot-dir",
    type=DIRECTORY,
    metavar="DIR",
    help="write the snapshot taken before migrating here (default $MAILROOM_HOME/backups)",
)
@click.option("--no-snapshot", is_flag=True, help="migrate without writing a snapshot first")
@click.option("--key-file", type=FILE, metavar="PATH", help=SNAPSHOT_KEY_HELP)
@with_settings
def upgrade(
    settings: Settings, revision: str, snapshot_dir: Path | None, no_snapshot: bool, key_file: Path | None
) -> int:
    """`mailroom db upgrade [REVISION]`: only this command snapshots; `worker.core.db.upgrade`, which the
    embedded server, the demo and the tests migrate with, does not."""
    from worker.core import db as database

    url = database.database_url(settings, migrate=False)
    if not no_snapshot:
        snapshot_before_upgrade(settings, url, revision, snapshot_dir, key_file)
    ran = database.upgrade(url, revision)
    click.echo(f"database at {database.current_revision(url)}" + ("" if ran else " (already up to date)"))
    return 0


@db.command(
    "downgrade",
    cls=Command,
    help=DOWNGRADE,
    short_help="migrate down to REV ('base' removes Mailroom's tables)",
)
@click.argument("revision")
@with_settings
def downgrade(settings: Settings, revision: str) -> int:
    """`mailroom db downgrade REVISION`."""
    from worker.core import db as database

    url = database.database_url(settings, migrate=False)
    database.downgrade(url, revision)
    click.echo(f"database at {database.current_revision(url) or 'base'}")
    return 0


@db.command("current", cls=Command, help=CURRENT, short_help="print the revision the database is at")
@with_settings
def current(settings: Settings) -> int:
    """`mailroom db current`."""
    from worker.core import db as database

    url = database.database_url(settings, migrate=False)
    click.echo(database.current_revision(url) or "base (Mailroom is not installed in this database)")
    return 0


@db.command("url", cls=Command, help=URL, short_help="print the DSN in use, without its password")
@click.option(
    "--show-password",
    is_flag=True,
    help="print the password too (for a 0600 file or a secret store; never paste it into a command line)",
)
@with_settings
def url(settings: Settings, show_password: bool) -> int:
    """`mailroom db url [--show-password]`."""
    from psycopg.conninfo import conninfo_to_dict

    from worker.core import db as database
    from worker.core.pgtools import without_password

    # The embedded server is migrated on the spot; a database given by MAILROOM_DATABASE_URL is only
    # named: migrating a shared server is `mailroom db upgrade`'s, which takes a snapshot first.
    dsn = database.database_url(settings)
    hidden = not show_password and bool(conninfo_to_dict(dsn).get("password"))
    click.echo(without_password(dsn) if hidden else dsn)
    if hidden:
        click.echo(
            "(password left out: psql reads it from ~/.pgpass or PGPASSFILE; --show-password prints it)",
            err=True,
        )
    if not settings.database_url:
        others = len(database.embedded_server(settings).users(exclude_self=True))
        held = f"{others} Mailroom process(es) use it now" if others else "nothing else uses it now"
        click.echo(
            f"(the embedded server runs while a Mailroom process uses it, and {held}:"
            " `mailroom db serve` keeps it up)",
            err=True,
        )
    return 0


@db.command(
    "schema",
    cls=Command,
    help=SCHEMA,
    short_help="print the live mailroom schema (as migrations/schema.sql)",
)
@click.option("--check", is_flag=True, help="compare it with the shipped schema; exit 1 on a difference")
@with_settings
def schema(settings: Settings, check: bool) -> int:
    """`mailroom db schema [--check]`."""
    from worker.core import db as database
    from worker.core.schema import dump_schema, schema_diff

    dsn = database.database_url(settings, migrate=False)
    if not check:
        sys.stdout.write(dump_schema(dsn))
        return 0
    diff = schema_diff(dsn)
    sys.stdout.write("".join(diff) if diff else "the live schema is the one this version ships\n")
    return 1 if diff else 0


@db.command(
    "serve",
    cls=Command,
    help=SERVE,
    short_help="keep the embedded PostgreSQL running until Ctrl-C (for psql)",
)
@with_settings
def serve(settings: Settings) -> int:
    """`mailroom db serve`."""
    from worker.core import db as database

    if settings.database_url:
        click.echo("MAILROOM_DATABASE_URL is set: that server runs on its own; nothing to serve", err=True)
        return 0
    click.echo(database.database_url(settings))
    server = database.embedded_server(settings)
    click.echo(
        f"embedded PostgreSQL in {server.pgdata} is up (DSN above, or `mailroom db url`);"
        " Ctrl-C or SIGTERM lets it go",
        err=True,
    )
    _until_interrupted()
    server.close()
    click.echo(
        "let go of the embedded PostgreSQL: it stops unless another Mailroom process uses it", err=True
    )
    return 0


def _until_interrupted() -> None:
    """Return on Ctrl-C (SIGINT) or SIGTERM."""

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)  # a signal interrupts it at once


@db.command(
    "status",
    cls=Command,
    help=STATUS,
    short_help="the embedded server: pid, port, version, data directory, who uses it",
)
@with_settings
def status(settings: Settings) -> int:
    """`mailroom db status`."""
    from worker.core import db as database

    if settings.database_url:
        click.echo("MAILROOM_DATABASE_URL is set: Mailroom uses that server, not an embedded one")
        return 0
    server = database.embedded_server(settings)
    found = server.status()
    if found is None:
        click.echo(f"no embedded PostgreSQL is running in {server.pgdata}")
        return 0
    click.echo(f"embedded PostgreSQL {found.version}, pid {found.pid}, port {found.port or 'socket only'}")
    click.echo(f"data directory {found.pgdata}")
    click.echo(f"socket directory {found.socket_dir}")
    click.echo(f"used by {len(found.users)} process(es)" + (f": {_pids(found.users)}" if found.users else ""))
    return 0


@db.command(
    "stop",
    cls=Command,
    help=STOP,
    short_help="stop the embedded PostgreSQL (refused while other processes use it)",
)
@click.option("--force", is_flag=True, help="stop it even while other Mailroom processes use it")
@with_settings
def stop(settings: Settings, force: bool) -> int:
    """`mailroom db stop [--force]`."""
    from worker.core import db as database

    server = database.embedded_server(settings)
    if server.running_pid() is None:
        click.echo(f"no embedded PostgreSQL is running in {server.pgdata}")
        return 0
    users = server.users(exclude_self=True)
    if users and not force:
        click.echo(
            f"error: the embedded PostgreSQL is in use by {len(users)} process(es) ({_pids(users)});"
            " stop them first, or `mailroom db stop --force`",
            err=True,
        )
        return 1
    server.stop_now()
    click.echo(f"stopped the embedded PostgreSQL in {server.pgdata}")
    return 0


def _pids(users: dict[int, str]) -> str:
    return ", ".join(f"{pid} {what}" for pid, what in sorted(users.items()))


db.add_command(backup)
db.add_command(restore)
db.add_command(verify)


@db.command(
    "grant",
    cls=Command,
    help=GRANT,
    short_help="grant a role the least it needs: an application's (app) or a reader's (read-only)",
)
@click.argument("kind", type=click.Choice(("app", "read-only")))
@click.argument("role")
@click.option("--create", is_flag=True, help="create the role (LOGIN, no password) if missing")
@with_database
def grant(database: Database, kind: str, role: str, create: bool) -> int:
    """`mailroom db grant app|read-only ROLE [--create]`: grants on this version's tables, so at its schema."""
    import psycopg

    from worker.ops import roles
    from worker.ops.audit import cli_actor

    with psycopg.connect(database.url) as conn:
        try:
            created = roles.grant(conn, kind, role, create=create, actor=cli_actor())
        except roles.RoleError as exc:
            click.echo(f"mailroom db grant: {exc}", err=True)
            return 2
    what = "enqueue and read its own email's status" if kind == "app" else "read everything but secrets"
    click.echo(f"{'created role' if created else 'role'} {role}: may now {what}")
    if created:
        click.echo(
            f"it has no password yet: ALTER ROLE {role} PASSWORD '...' (or use certificate/peer login)"
        )
    return 0
