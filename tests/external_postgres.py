"""A PostgreSQL server set up as a deployment's, for running the suite against it: SCRAM passwords, no superuser.

    eval "$(.venv/bin/python -m tests.external_postgres start)"   # prints: export MAILROOM_TEST_DATABASE_URL=...
    .venv/bin/python -m pytest --ignore=tests/unit -n 2
    .venv/bin/python -m tests.external_postgres stop

`start` makes a cluster with Debian's binaries (`--bin`, PostgreSQL 15 by default) in `--dir`
(default `/tmp/mailroom-pg15`): every connection authenticates with a SCRAM password (`scram-sha-256`
for TCP and the Unix socket, no `trust` line), the superuser's password comes from a password file
and is never used again, and the suite connects as `mailroom_owner`, a role with LOGIN, CREATEDB and
CREATEROLE but not SUPERUSER: it owns the test databases, runs the migrations and creates the roles
the tests log in as. The server listens on 127.0.0.1 only (`--port`, default 54315). It holds nothing
worth keeping, so it never waits on the disk (fsync off), as the embedded test server does not.

Run as root, the server runs as the `postgres` user (PostgreSQL refuses root). The URL, with the
owner's password, goes to stdout as a shell `export` line and to `<dir>/url`; `start` on a running
server prints it again. `clean` drops the test databases and roles a run left behind (a run stopped
halfway leaves them; a role left over fails the tests that make it). `stop` stops the server;
`stop --remove` deletes the directory too.
"""

from __future__ import annotations

import argparse
import os
import pwd
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from psycopg import sql
from psycopg.conninfo import make_conninfo

OWNER = "mailroom_owner"
DEFAULT_DIR = Path("/tmp/mailroom-pg15")
DEFAULT_BIN = Path("/usr/lib/postgresql/15/bin")
DEFAULT_PORT = 54315
# What the suite needs beyond the defaults: two test processes, each with pools, workers and listeners.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    "password_encryption": "'scram-sha-256'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "log_min_messages": "warning",
}
HBA = (
    "# Every connection proves its password (SCRAM), as on a deployment's server.\n"
    "local all all scram-sha-256\n"
    "host  all all 127.0.0.1/32 scram-sha-256\n"
    "host  all all ::1/128 scram-sha-256\n"
)


def _runner() -> list[str]:
    """Run PostgreSQL's programs as `postgres` when we are root (it will not run as root)."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(path, user.pw_uid, user.pw_gid)


def _run(*args: str | Path) -> None:
    # The postmaster inherits our stdio when pg_ctl starts it: give it none, or a caller reading our
    # output through a pipe ($(...)) would wait for the server to exit.
    subprocess.run(
        [*_runner(), *map(str, args)], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )


def _running(data: Path) -> bool:
    return (data / "postmaster.pid").exists()


def start(directory: Path, bin_dir: Path, port: int) -> str:
    """Create (first time) and start the server; return the owner's URL."""
    data = directory / "data"
    url_file = directory / "url"
    if not (data / "PG_VERSION").exists():
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True, mode=0o700)
        _chown(directory)
        superuser_password = secrets.token_urlsafe(24)
        owner_password = secrets.token_urlsafe(24)
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False) as pwfile:
            pwfile.write(superuser_password + "\n")
        _chown(Path(pwfile.name))
        try:
            _run(bin_dir / "initdb", "-D", data, "-U", "postgres", "--pwfile", pwfile.name,
                 "--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "-E", "UTF8",
                 "--locale=C.UTF-8")  # fmt: skip
        finally:
            os.unlink(pwfile.name)
        (data / "pg_hba.conf").write_text(HBA)
        with (data / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/external_postgres.py\n")
            conf.write(f"port = {port}\nunix_socket_directories = '{data}'\n")
            conf.writelines(f"{key} = {value}\n" for key, value in SETTINGS.items())
        _pg_ctl_start(bin_dir, data)
        _make_owner(port, superuser_password, owner_password)
        url = f"postgresql://{OWNER}:{owner_password}@127.0.0.1:{port}/postgres"
        fd = os.open(url_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(url + "\n")
        return url
    if not _running(data):
        _pg_ctl_start(bin_dir, data)
    return url_file.read_text().strip()


def _pg_ctl_start(bin_dir: Path, data: Path) -> None:
    _run(bin_dir / "pg_ctl", "-D", data, "-l", data / "server.log", "-w", "start")


def _make_owner(port: int, superuser_password: str, owner_password: str) -> None:
    import psycopg

    admin = make_conninfo(
        host="127.0.0.1", port=port, dbname="postgres", user="postgres", password=superuser_password
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN CREATEDB CREATEROLE NOSUPERUSER PASSWORD {}").format(
                sql.Identifier(OWNER), sql.Literal(owner_password)
            )
        )
        # The one superuser-only setting a test changes: tests/worker/test_bulk_speedpaths.py counts
        # trigger calls in pg_stat_xact_user_functions (GRANT SET ON PARAMETER: PostgreSQL 15 and later).
        conn.execute(sql.SQL("GRANT SET ON PARAMETER track_functions TO {}").format(sql.Identifier(OWNER)))
        # What docs/install.md asks for the operator's role: other sessions' state in pg_stat_activity,
        # which names who holds the audit trail's head (tests/ops/test_audit_head.py).
        conn.execute(sql.SQL("GRANT pg_read_all_stats TO {}").format(sql.Identifier(OWNER)))


def clean(directory: Path) -> list[str]:
    """Drop what an interrupted run left on the server: its test databases and the roles its tests made."""
    import psycopg

    url = (directory / "url").read_text().strip()
    dropped = []
    with psycopg.connect(url, autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'mailroom\\_test\\_%'"
        ).fetchall()
        for (name,) in names:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            dropped.append(f"database {name}")
        others = conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname !~ '^pg_' AND rolname NOT IN ('postgres', %s)",
            (OWNER,),
        ).fetchall()
        for (name,) in others:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
            dropped.append(f"role {name}")
    return dropped


def stop(directory: Path, bin_dir: Path, *, remove: bool) -> None:
    """Stop the server (fast shutdown), and delete its directory when asked."""
    data = directory / "data"
    if _running(data):
        _run(bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
    if remove:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """`start`, `clean` or `stop` the server."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.external_postgres", description=__doc__.split("\n")[0]
    )
    parser.add_argument("action", choices=["start", "clean", "stop"])
    parser.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})"
    )
    parser.add_argument(
        "--bin", type=Path, default=DEFAULT_BIN, help=f"PostgreSQL programs (default {DEFAULT_BIN})"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port on 127.0.0.1 (default {DEFAULT_PORT})"
    )
    parser.add_argument("--remove", action="store_true", help="stop: delete the cluster directory too")
    args = parser.parse_args(argv)
    if args.action == "stop":
        stop(args.dir, args.bin, remove=args.remove)
        return 0
    if args.action == "clean":
        for dropped in clean(args.dir):
            print(f"dropped {dropped}", file=sys.stderr)
        return 0
    if not (args.bin / "initdb").exists():
        sys.exit(
            f"no initdb in {args.bin}; install Debian's postgresql-15 (apt-get install postgresql-15) or pass --bin"
        )
    url = start(args.dir, args.bin, args.port)
    print(f"export MAILROOM_TEST_DATABASE_URL={shlex.quote(url)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
