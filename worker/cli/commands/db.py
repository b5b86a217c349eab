"""`mailroom db`: migrations, the DSN in use, the embedded server (serve, status, stop), backup and restore."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from worker.core.config import Settings
from worker.ops.audit import cli_actor

DESCRIPTION = """\
Migrate the schema, show the database in use, run or stop the embedded PostgreSQL, back it up.

Without MAILROOM_DATABASE_URL every command uses a private embedded PostgreSQL in
$MAILROOM_HOME/pg, started on demand and stopped when the last Mailroom process using it exits.

Examples:
  mailroom db upgrade                 migrate to the newest schema (run it against PostgreSQL
                                      itself, not through a transaction-pooling PgBouncer)
  mailroom db status                  the embedded server: pid, port, version, data directory, users
  mailroom db backup mailroom.dump    a pg_dump of the mailroom schema (mode 0600)
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
Exit status 0, 3 when the database cannot be reached.

Examples:
  mailroom db upgrade
  mailroom db upgrade 0005"""

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

Examples:
  psql "$(mailroom db url)" -c 'TABLE mailroom.sender_accounts'
  mailroom db url --show-password > ~/.config/mailroom/dsn    (then chmod 600 it)"""

SCHEMA = """\
Print the live mailroom schema the way migrations/schema.sql holds it, or with --check compare it
with the schema this version ships. Changes nothing.
Exit status 0, 1 when --check finds a difference (printed as a diff).

Examples:
  mailroom db schema > live.sql
  mailroom db schema --check"""

SERVE = """\
Start the embedded PostgreSQL (in $MAILROOM_HOME/pg) and keep it running until Ctrl-C or SIGTERM,
printing its DSN, so that psql and other tools can use it. Has no effect on a server given by
MAILROOM_DATABASE_URL. Exit status 0 when stopped.

Example:
  mailroom db serve"""

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

BACKUP = """\
Write a pg_dump (custom format) of the mailroom schema and its data to FILE, created with mode 0600
(it holds encrypted secrets and personal data). The database is not changed.
Exit status 0, 1 when pg_dump fails.

Example:
  mailroom db backup mailroom-$(date +%F).dump"""

RESTORE = """\
Restore a backup made by `mailroom db backup` into an empty database (MAILROOM_DATABASE_URL, or the
embedded one). A database that already holds a mailroom schema is refused and left alone.
Exit status 0, 1 when it is refused or pg_restore fails.

Example:
  MAILROOM_DATABASE_URL=postgresql://localhost/fresh mailroom db restore mailroom.dump"""

GRANT = """\
Grant a database role the least it needs: `app` may enqueue (mailroom.enqueue) and read its own
email's status (mailroom.my_emails); `read-only` may read every table but the secrets. Other
privileges of the role are left alone; the grant is audited. After an upgrade, grant again.
Exit status 0, 2 when the role is missing (use --create) or its name is invalid.

Examples:
  mailroom db grant app shop --create
  mailroom db grant read-only grafana"""


def cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch `mailroom db ACTION`."""
    handler = {
        "stop": _stop,
        "status": _status,
        "serve": _serve,
        "backup": _backup,
        "restore": _restore,
        "grant": _grant,
    }.get(args.db_command)
    if handler is not None:
        return handler(args, settings)
    return _migrations(args, settings)


def _migrations(args: argparse.Namespace, settings: Settings) -> int:
    from psycopg.conninfo import conninfo_to_dict

    from worker.core import db
    from worker.core.pgtools import without_password

    url = db.database_url(settings, migrate=False)
    if args.db_command == "upgrade":
        ran = db.upgrade(url, args.revision)
        print(f"database at {db.current_revision(url)}" + ("" if ran else " (already up to date)"))
    elif args.db_command == "downgrade":
        db.downgrade(url, args.revision)
        print(f"database at {db.current_revision(url) or 'base'}")
    elif args.db_command == "current":
        print(db.current_revision(url) or "base (Mailroom is not installed in this database)")
    elif args.db_command == "url":
        db.upgrade(url)
        hidden = not args.show_password and bool(conninfo_to_dict(url).get("password"))
        print(without_password(url) if hidden else url)
        if hidden:
            print(
                "(password left out: psql reads it from ~/.pgpass or PGPASSFILE; --show-password prints it)",
                file=sys.stderr,
            )
        if not settings.database_url:
            print(
                "(the embedded server runs while a Mailroom process uses it; `mailroom db serve` keeps it up)",
                file=sys.stderr,
            )
    elif args.db_command == "schema":
        return _schema(url, check=args.check)
    return 0


def _schema(url: str, *, check: bool) -> int:
    from worker.core.schema import dump_schema, schema_diff

    if not check:
        sys.stdout.write(dump_schema(url))
        return 0
    diff = schema_diff(url)
    sys.stdout.write("".join(diff) if diff else "the live schema is the one this version ships\n")
    return 1 if diff else 0


def _stop(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core import db

    server = db.embedded_server(settings)
    if server.running_pid() is None:
        print("no embedded PostgreSQL is running in", server.pgdata)
        return 0
    users = server.users(exclude_self=True)
    if users and not args.force:
        print(
            f"error: the embedded PostgreSQL is in use by {len(users)} process(es) ({_pids(users)});"
            " stop them first, or `mailroom db stop --force`",
            file=sys.stderr,
        )
        return 1
    server.stop_now()
    print("stopped the embedded PostgreSQL in", server.pgdata)
    return 0


def _status(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core import db

    if settings.database_url:
        print("MAILROOM_DATABASE_URL is set: Mailroom uses that server, not an embedded one")
        return 0
    server = db.embedded_server(settings)
    status = server.status()
    if status is None:
        print(f"no embedded PostgreSQL is running in {server.pgdata}")
        return 0
    print(f"embedded PostgreSQL {status.version}, pid {status.pid}, port {status.port or 'socket only'}")
    print(f"data directory {status.pgdata}")
    print(f"socket directory {status.socket_dir}")
    print(f"used by {len(status.users)} process(es)" + (f": {_pids(status.users)}" if status.users else ""))
    return 0


def _pids(users: dict[int, str]) -> str:
    return ", ".join(f"{pid} {what}" for pid, what in sorted(users.items()))


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core import db

    url = db.database_url(settings)
    print(url, flush=True)
    print("embedded PostgreSQL is up; Ctrl-C stops it", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            signal.pause()
    return 0


def _backup(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.db import database_url
    from worker.ops.backup import backup

    print(f"backing up to {args.file} ...", file=sys.stderr, flush=True)
    result = backup(database_url(settings), args.file)
    print(f"wrote {result.path} ({result.bytes:,} bytes, PostgreSQL {result.server_major}, {result.tool})")
    return 0


def _restore(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.db import database_url
    from worker.ops.backup import restore

    print(f"restoring {args.file} ...", file=sys.stderr, flush=True)
    result = restore(database_url(settings, migrate=False), args.file)
    print(f"restored {result.path} ({result.bytes:,} bytes) into PostgreSQL {result.server_major}")
    return 0


def _grant(args: argparse.Namespace, settings: Settings) -> int:
    import psycopg

    from worker.core import db
    from worker.ops import roles

    url = db.database_url(settings)
    with psycopg.connect(url) as conn:
        try:
            created = roles.grant(conn, args.kind, args.role, create=args.create, actor=cli_actor())
        except roles.RoleError as exc:
            print(f"mailroom db grant: {exc}", file=sys.stderr)
            return 2
    what = "enqueue and read its own email's status" if args.kind == "app" else "read everything but secrets"
    print(f"{'created role' if created else 'role'} {args.role}: may now {what}")
    if created:
        print(
            f"it has no password yet: ALTER ROLE {args.role} PASSWORD '...' (or use certificate/peer login)"
        )
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom db` and its actions."""
    parser = sub.add_parser(
        "db",
        help="migrate the schema, show, serve or stop the database, back it up and restore it",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    raw = argparse.RawDescriptionHelpFormatter

    def action(name: str, text: str, described: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            name, help=text, description=described, formatter_class=raw
        )
        return parser

    up = action("upgrade", "migrate to a revision (default: head)", UPGRADE)
    up.add_argument("revision", nargs="?", default="head")
    down = action("downgrade", "migrate down to REV ('base' removes Mailroom's tables)", DOWNGRADE)
    down.add_argument("revision")
    action("current", "print the revision the database is at", CURRENT)
    shown = action("url", "print the DSN in use, without its password", URL)
    shown.add_argument(
        "--show-password",
        action="store_true",
        help="print the password too (for a 0600 file or a secret store; never paste it into a command line)",
    )
    schema = action("schema", "print the live mailroom schema (as migrations/schema.sql)", SCHEMA)
    schema.add_argument(
        "--check", action="store_true", help="compare it with the shipped schema; exit 1 on a difference"
    )
    action("serve", "keep the embedded PostgreSQL running until Ctrl-C (for psql)", SERVE)
    action("status", "the embedded server: pid, port, version, data directory, who uses it", STATUS)
    stop = action("stop", "stop the embedded PostgreSQL (refused while other processes use it)", STOP)
    stop.add_argument(
        "--force", action="store_true", help="stop it even while other Mailroom processes use it"
    )
    backup = action("backup", "write a backup of the mailroom schema and its data to FILE", BACKUP)
    backup.add_argument("file", type=Path, metavar="FILE")
    restore = action("restore", "restore a backup into an empty database", RESTORE)
    restore.add_argument("file", type=Path, metavar="FILE")
    grant = action(
        "grant", "grant a role the least it needs: an application's (app) or a reader's (read-only)", GRANT
    )
    grant.add_argument(
        "kind", choices=("app", "read-only"), help="app: enqueue and read own status; read-only"
    )
    grant.add_argument("role", help="the database role (lower-case letters, digits, _)")
    grant.add_argument(
        "--create", action="store_true", help="create the role (LOGIN, no password) if missing"
    )
    parser.set_defaults(handler=cmd_db)
