"""The database password never reaches a client program's command line, where any local user reads it."""

from __future__ import annotations

import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.fixtures_db import adopt_role, drop_roles
from worker.core.config import ConfigError
from worker.core.pgtools import client_tool, server_major, tool_connection, without_password

CANARY = "argv-canary:s3cr\\et"  # a colon and a backslash: the password file's own escaping is tested too
CANARY_ROLE = "mr_dump_reader"  # not a word the tests look for in argv


@pytest.fixture
def canary_url(db_url: str, role_lock: None) -> Iterator[str]:
    """A DSN whose password is CANARY and works: a role that has it and may read (and so dump) the schema.

    On a server that checks passwords only the right one connects; the embedded server never asks."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        role = sql.Identifier(CANARY_ROLE)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(CANARY)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA mailroom TO {}").format(role))
        for kind in ("TABLES", "SEQUENCES"):
            conn.execute(sql.SQL(f"GRANT SELECT ON ALL {kind} IN SCHEMA mailroom TO {{}}").format(role))
        adopt_role(conn, CANARY_ROLE)  # pg_stat_activity shows a non-superuser the waits of its roles only
    yield make_conninfo(db_url, user=CANARY_ROLE, password=CANARY)
    drop_roles(db_url, CANARY_ROLE)


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended while we looked
            if int(fields[1]) == parent:
                found.append(int(entry.name))
    return found


def _blocked_pg_dump(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_dump' AND wait_event_type = 'Lock'"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.e2e
def test_db_backup_gives_pg_dump_no_password_in_argv_but_a_private_password_file(
    db_url: str, canary_url: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**cli_env, "MAILROOM_DATABASE_URL": canary_url}
    with psycopg.connect(db_url) as holder:
        # pg_dump waits for this lock while we look at it from outside, as any local user could.
        holder.execute("LOCK TABLE mailroom.email_queue IN ACCESS EXCLUSIVE MODE")
        cli = subprocess.Popen(
            [sys.executable, "-m", "worker.cli.main", "db", "backup", str(tmp_path / "b.dump")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while not _blocked_pg_dump(db_url):
                assert cli.poll() is None and time.monotonic() < deadline, "pg_dump never started"
                time.sleep(0.05)
            (child,) = (
                pid for pid in _children(cli.pid) if b"pg_dump" in Path(f"/proc/{pid}/cmdline").read_bytes()
            )
            argv = Path(f"/proc/{child}/cmdline").read_bytes()
            environ = dict(
                item.split(b"=", 1)
                for item in Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
                if b"=" in item
            )
            assert b"canary" not in argv and b"password" not in argv
            assert b"canary" not in b"\0".join(environ.values())  # no PGPASSWORD, no MAILROOM_DATABASE_URL
            assert not [key for key in environ if key.startswith(b"MAILROOM_")]  # the secret key stays home
            passfile = Path(environ[b"PGPASSFILE"].decode())
            assert stat.S_IMODE(passfile.stat().st_mode) == 0o600
            assert stat.S_IMODE(passfile.parent.stat().st_mode) == 0o700
            assert passfile.read_text() == "*:*:*:*:argv-canary\\:s3cr\\\\et\n"
        finally:
            holder.rollback()
            out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    assert b"wrote" in out and b"canary" not in out + err
    assert not passfile.exists() and not passfile.parent.exists()


def _password_listener(server: socket.socket, heard: list[bytes]) -> None:
    """Speak just enough of PostgreSQL's protocol to ask for a cleartext password and keep it."""
    peer, _ = server.accept()
    with peer:
        while True:
            (length,) = struct.unpack("!i", peer.recv(4, socket.MSG_WAITALL))
            body = peer.recv(length - 4, socket.MSG_WAITALL)
            if struct.unpack("!i", body[:4])[0] in (80877103, 80877104):  # SSLRequest, GSSENCRequest
                peer.sendall(b"N")
                continue
            break  # the startup message
        peer.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
        _, length = struct.unpack("!ci", peer.recv(5, socket.MSG_WAITALL))
        heard.append(peer.recv(length - 4, socket.MSG_WAITALL).rstrip(b"\0"))
        message = b"SFATAL\0C28P01\0Mheard you\0\0"
        peer.sendall(b"E" + struct.pack("!i", len(message) + 4) + message)


@pytest.mark.e2e
def test_the_client_program_really_reads_the_password_from_the_private_file(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", "not this one")  # it would win over the file: dropped
    pg_dump = client_tool("pg_dump", server_major(db_url))
    heard: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        listener = threading.Thread(target=_password_listener, args=(server, heard), daemon=True)
        listener.start()
        port = server.getsockname()[1]
        url = f"postgresql://mailer:{CANARY.replace(':', '%3A').replace(chr(92), '%5C')}@127.0.0.1:{port}/x"
        with tool_connection(url) as tool:
            assert "canary" not in tool.dsn
            done = subprocess.run(
                [str(pg_dump), "--schema-only", "--dbname", tool.dsn],
                env=tool.env,
                capture_output=True,
                check=False,
                timeout=30,
            )
        listener.join(timeout=30)
    assert done.returncode != 0 and b"heard you" in done.stderr
    assert heard == [CANARY.encode()]


def test_without_password_keeps_everything_but_the_password() -> None:
    dsn = without_password("postgresql://shop:pw@db.example.com:6432/mail?sslmode=require")
    assert conninfo_to_dict(dsn) == {
        "user": "shop",
        "host": "db.example.com",
        "port": "6432",
        "dbname": "mail",
        "sslmode": "require",
    }


def test_a_password_with_a_line_break_is_refused_rather_than_put_in_argv() -> None:
    with pytest.raises(ConfigError, match="line break"), tool_connection("host=h password='a\nb'"):
        pass


@pytest.mark.e2e
def test_db_url_leaves_the_password_out_unless_asked_and_says_where_psql_finds_it(
    canary_url: str, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, "MAILROOM_DATABASE_URL": canary_url}
    argv = [sys.executable, "-m", "worker.cli.main", "db", "url"]
    shown = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    assert "canary" not in shown.stdout and "password" not in shown.stdout
    # still the same database
    assert conninfo_to_dict(shown.stdout.strip()) == conninfo_to_dict(without_password(canary_url))
    assert "~/.pgpass" in shown.stderr and "--show-password" in shown.stderr
    whole = subprocess.run([*argv, "--show-password"], env=env, capture_output=True, text=True, check=True)
    assert conninfo_to_dict(whole.stdout.strip())["password"] == CANARY
    helped = subprocess.run([*argv, "--help"], env=env, capture_output=True, text=True, check=True)
    assert "readable by every local user" in helped.stdout and "PGPASSFILE" in helped.stdout


def test_db_url_names_an_external_database_without_migrating_it(
    empty_db_url: str,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.cli import run

    monkeypatch.setenv("MAILROOM_DATABASE_URL", empty_db_url)
    code, out, _ = run(capsys, "db", "url")
    assert code == 0 and conninfo_to_dict(out.strip()) == conninfo_to_dict(without_password(empty_db_url))
    with psycopg.connect(empty_db_url) as conn:
        row = conn.execute("SELECT to_regnamespace('mailroom') IS NULL").fetchone()
    assert row == (True,)  # migrating a shared server is `db upgrade`'s, with its snapshot
