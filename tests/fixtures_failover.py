"""Pytest plugin for the failover drills: a PostgreSQL 15 primary with a synchronous standby, PgBouncer
in front of each node, and what a drill does to them.

Debian's packages, not the embedded server: `postgresql-15` (its binaries in /usr/lib/postgresql/15/bin)
and `pgbouncer` (the test command installs both as SYSTEM_TOOLS in CI; elsewhere a test that needs
one skips with the apt-get line, and fails instead under CI). The pair is built once per session as
production runs it -- initdb with SCRAM passwords, Mailroom migrated by a non-superuser that owns its
database, a standby made by `pg_basebackup -R` -- and each drill starts on a copy of it, with
`synchronous_standby_names` naming the standby, so a commit the primary acknowledges is on both.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

PG_BIN = Path(os.environ.get("MAILROOM_TEST_PG15_BIN", "/usr/lib/postgresql/15/bin"))
APT_POSTGRESQL = "apt-get install -y postgresql-15"
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
APT_PGBOUNCER = "apt-get install -y pgbouncer"

# Throwaway secrets of a throwaway cluster on loopback.
SUPERUSER, SUPERUSER_PASSWORD = "postgres", "drill-superuser-secret"
OWNER, OWNER_PASSWORD = "mailroom_owner", "drill-owner-secret"
DBNAME = "mailroom"
STANDBY_NAME = "standby"

# A throwaway cluster never waits on the disk: a killed postmaster loses nothing the kernel holds,
# and what the drills check is what reached the standby, which synchronous replication decides.
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "off",
    "full_page_writes": "off",
    "max_wal_senders": "4",
    # Small WAL files (initdb --wal-segsize=1) and few of them: a drill copies the data directories.
    "min_wal_size": "'4MB'",
    "max_wal_size": "'64MB'",
    "wal_keep_size": "'32MB'",
    # A standby whose primary is gone looks for it again this often (the default, 5 s, also delays
    # its promotion by up to that long).
    "wal_retrieve_retry_interval": "'100ms'",
    "max_connections": "60",
    "shared_buffers": "'32MB'",
    "log_line_prefix": "'%m [%p] %u '",
}


def _require(path: str, apt: str) -> str:
    """A tool the drills need; the test fails without it under CI, else skips with the apt-get line."""
    if shutil.which(path) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{path} is not installed: {apt}")
        pytest.skip(f"{path} is not installed: {apt}")
    return path


def _server_user() -> dict[str, Any]:
    """PostgreSQL refuses to run as root: as root, its tools run as Debian's `postgres` user."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


def _own(path: Path) -> None:
    """Hand a directory tree to the user the servers run as."""
    who = _server_user()
    if who:
        for found in (path, *path.rglob("*")):
            shutil.chown(found, who["user"], who["group"])


def _run(*args: str | Path, **kwargs: Any) -> None:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, **_server_user(), **kwargs
    )
    if done.returncode != 0:
        raise RuntimeError(f"{Path(str(args[0])).name} failed: {done.stdout}{done.stderr}")


def scratch(prefix: str) -> Path:
    """A new directory the servers' user may use: in memory (/dev/shm) when it has room, as a drill copies
    and removes two data directories (a few thousand files) on its way; else in the temporary directory."""
    shm = Path("/dev/shm")
    roomy = shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2**30
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=shm if roomy else None))
    work.chmod(0o755)
    return work


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_accepting(url: str, what: str, bound: float = 30.0) -> None:
    """Wait for a server to take a connection; fails past `bound` seconds (a wait cut off, never a
    duration asserted)."""
    deadline = time.monotonic() + bound
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not accept connections: {exc}") from exc
            time.sleep(0.05)


@dataclass
class Node:
    """One PostgreSQL 15 server of the pair: its data directory and port."""

    name: str
    data: Path
    port: int

    @property
    def admin_url(self) -> str:
        """The superuser's DSN (passwords, as on the wire: SCRAM)."""
        return f"postgresql://{SUPERUSER}:{SUPERUSER_PASSWORD}@127.0.0.1:{self.port}/postgres"

    @property
    def owner_url(self) -> str:
        """The database owner's DSN on this node alone."""
        return f"postgresql://{OWNER}:{OWNER_PASSWORD}@127.0.0.1:{self.port}/{DBNAME}"

    def configure(self, **settings: str) -> None:
        """Append settings to postgresql.conf (the last one of a name wins)."""
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        _run(PG_BIN / "pg_ctl", "-D", self.data, "-l", self.data / "server.log", "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop the server at once, if it runs."""
        subprocess.run(
            [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
            **_server_user(),
        )

    def kill(self) -> None:
        """The crash: SIGKILL to the postmaster (its backends go when they notice it gone)."""
        pid = int((self.data / "postmaster.pid").read_text(encoding="ascii").split()[0])
        os.kill(pid, signal.SIGKILL)

    def demote(self) -> None:
        """What a node losing its leadership does while it stays up: every new transaction read-only."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")

    def promote(self) -> None:
        """Make this standby the primary, and wait until it takes writes."""
        _run(PG_BIN / "pg_ctl", "-D", self.data, "-w", "-t", "60", "promote")

    def log(self) -> str:
        """The server's log, for a failed test's message."""
        path = self.data / "server.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


class Relay:
    """The standby's way to its primary: a TCP relay on loopback that a drill can hold (what the
    primary sends stops reaching the standby, as over a congested link) and cut (what was held is
    lost with the primary). Acknowledged synchronous commits are on the standby whatever happens here;
    asynchronous ones are not."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.flowing = threading.Event()
        self.flowing.set()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="replication-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                standby, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                primary = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                standby.close()
                continue
            primary.settimeout(None)
            self.sockets += [standby, primary]
            threading.Thread(target=_pipe, args=(primary, standby, self.flowing), daemon=True).start()
            threading.Thread(target=_pipe, args=(standby, primary, None), daemon=True).start()

    def hold(self) -> None:
        """Stop passing on what the primary sends (the standby's acknowledgements still go back)."""
        self.flowing.clear()

    def cut(self) -> None:
        """Drop the connections and whatever they held; new ones flow again."""
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.sockets.clear()
        self.flowing.set()

    def close(self) -> None:
        """Stop relaying."""
        self.listener.close()
        self.cut()


def _pipe(source: socket.socket, sink: socket.socket, gate: threading.Event | None) -> None:
    try:
        while True:
            if gate is not None:
                gate.wait()
            data = source.recv(65536)
            if not data:
                return
            sink.sendall(data)
    except OSError:
        return


@dataclass
class Pair:
    """A primary and its synchronous standby, and the multi-host URLs that find whichever takes writes."""

    primary: Node
    standby: Node
    work: Path  # a directory the servers' user may use (pytest's tmp_path is root's alone)
    relay: Relay | None = None  # between the standby and the primary

    def url(self, ports: tuple[int, int] | None = None) -> str:
        """The owner's multi-host DSN over both nodes (or over `ports`, e.g. a PgBouncer on each)."""
        first, second = ports or (self.primary.port, self.standby.port)
        return (
            f"postgresql://{OWNER}:{OWNER_PASSWORD}@127.0.0.1:{first},127.0.0.1:{second}/{DBNAME}"
            "?target_session_attrs=read-write&connect_timeout=3"
        )

    def stop(self) -> None:
        """Stop both servers."""
        self.primary.stop()
        self.standby.stop()
        if self.relay is not None:
            self.relay.close()


def _initdb(data: Path, work: Path) -> None:
    password = work / "superuser.pw"
    password.write_text(SUPERUSER_PASSWORD + "\n", encoding="utf-8")
    _own(work)
    _run(PG_BIN / "initdb", "-D", data, "-U", SUPERUSER, "--auth=scram-sha-256", "--pwfile", password,
         "--no-sync", "--wal-segsize=1", "-E", "UTF8", "--locale=C.UTF-8")  # fmt: skip
    password.unlink()
    with (data / "pg_hba.conf").open("a", encoding="utf-8") as hba:
        hba.write("host replication all 127.0.0.1/32 scram-sha-256\n")


def _build_template(work: Path) -> Pair:
    """initdb, the owner role and its database, Mailroom migrated by the owner, a standby by
    pg_basebackup -R; both stopped cleanly, ready to be copied."""
    primary = Node("primary", work / "primary", free_port())
    _initdb(primary.data, work)
    primary.configure(port=str(primary.port), **SERVER_SETTINGS)
    primary.start()
    with psycopg.connect(primary.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {OWNER} LOGIN PASSWORD '{OWNER_PASSWORD}'")
        conn.execute(f"CREATE DATABASE {DBNAME} OWNER {OWNER}")
    from worker.core import db

    db.upgrade(primary.owner_url)
    standby = Node(STANDBY_NAME, work / STANDBY_NAME, free_port())
    _run(PG_BIN / "pg_basebackup", "-D", standby.data, "-h", "127.0.0.1", "-p", str(primary.port),
         "-U", SUPERUSER, "-R", "--no-sync", "--checkpoint=fast",
         env={**os.environ, "PGPASSWORD": SUPERUSER_PASSWORD})  # fmt: skip
    standby.configure(port=str(standby.port), cluster_name=f"'{STANDBY_NAME}'")
    _run(PG_BIN / "pg_ctl", "-D", primary.data, "-w", "-m", "fast", "stop")
    return Pair(primary, standby, work)


def _copy(template: Node, into: Path) -> Node:
    node = Node(template.name, into / template.name, free_port())
    _run("cp", "-a", template.data, node.data)  # as the servers' user: the copy is theirs already
    for stale in ("postmaster.pid", "server.log"):
        (node.data / stale).unlink(missing_ok=True)
    node.configure(port=str(node.port))
    return node


def start_pair(template: Pair, work: Path) -> Pair:
    """A copy of the template pair in `work` (empty), started, the standby synchronous (commits wait for it)."""
    _own(work)
    primary, standby = _copy(template.primary, work), _copy(template.standby, work)
    relay = Relay(primary.port)
    auto = standby.data / "postgresql.auto.conf"  # where pg_basebackup -R wrote primary_conninfo
    conninfo = auto.read_text(encoding="utf-8")
    auto.write_text(
        conninfo.replace(f"port={template.primary.port} ", f"port={relay.port} "), encoding="utf-8"
    )
    pair = Pair(primary, standby, work, relay)
    primary.start()
    standby.start()
    with psycopg.connect(primary.admin_url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        conn.execute("SELECT pg_reload_conf()")
        _wait_synchronous(conn, standby)
    return pair


def _wait_synchronous(conn: psycopg.Connection[Any], standby: Node) -> None:
    deadline = time.monotonic() + 30
    query = "SELECT 1 FROM pg_stat_replication WHERE application_name = %s AND sync_state = 'sync'"
    while conn.execute(query, (STANDBY_NAME,)).fetchone() is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the standby never became synchronous:\n{standby.log()[-2000:]}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def _pg15_template() -> Iterator[Pair]:
    _require(str(PG_BIN / "postgres"), APT_POSTGRESQL)
    work = scratch("mailroom-failover-template-")
    _own(work)
    try:
        template = _build_template(work)
        yield template
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def pg15_pair(_pg15_template: Pair) -> Iterator[Pair]:
    """A PostgreSQL 15 primary and its synchronous standby, Mailroom migrated, owned by a non-superuser
    with a password (SCRAM); stopped and removed after the test."""
    work = scratch("mailroom-failover-")
    try:
        pair = start_pair(_pg15_template, work)
        try:
            yield pair
        finally:
            pair.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class Bouncer:
    """PgBouncer in transaction pooling mode in front of one node at a time."""

    port: int
    process: subprocess.Popen[bytes]
    ini: Path
    log: Path

    @property
    def url(self) -> str:
        """The owner's DSN through PgBouncer."""
        return f"postgresql://{OWNER}:{OWNER_PASSWORD}@127.0.0.1:{self.port}/{DBNAME}"

    def point_at(self, node: Node) -> None:
        """What a failover manager does on a promotion (Patroni's on_role_change callback, say): the
        database entry names the new primary, and PgBouncer reloads (its connections to the old one
        close as they are released)."""
        self.ini.write_text(_bouncer_ini(node, self.port, self.ini.parent, self.log), encoding="utf-8")
        self.process.send_signal(signal.SIGHUP)


def _bouncer_ini(node: Node, port: int, work: Path, log: Path) -> str:
    return (
        "[databases]\n"
        f"* = host=127.0.0.1 port={node.port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = scram-sha-256\nauth_file = {work / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 12\nmax_client_conn = 200\n"
        # A refused server login is tried again after a second, not the default 15.
        "server_login_retry = 1\n"
        f"logfile = {log}\npidfile = {work / 'pgbouncer.pid'}\n"
    )


def start_pgbouncer(node: Node, work: Path) -> Bouncer:
    """PgBouncer on a port of its own in front of `node`: transaction pooling, SCRAM from clients, the
    owner's password to the server."""
    port, log, ini = free_port(), work / "pgbouncer.log", work / "pgbouncer.ini"
    (work / "users.txt").write_text(f'"{OWNER}" "{OWNER_PASSWORD}"\n', encoding="utf-8")
    ini.write_text(_bouncer_ini(node, port, work, log), encoding="utf-8")
    _own(work)
    who = _server_user()
    argv = [PGBOUNCER, *(["-u", who["user"]] if who else []), str(ini)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bouncer = Bouncer(port, process, ini, log)
    try:
        wait_until_accepting(bouncer.url, "pgbouncer")
    except BaseException:
        process.kill()
        raise
    return bouncer


@pytest.fixture
def pgbouncer(pg15_pair: Pair) -> Iterator[Bouncer]:
    """PgBouncer in front of the primary of `pg15_pair`; stopped after the test."""
    _require(PGBOUNCER, APT_PGBOUNCER)
    work = pg15_pair.work / "pgbouncer"
    work.mkdir()
    bouncer = start_pgbouncer(pg15_pair.primary, work)
    try:
        yield bouncer
    finally:
        bouncer.process.terminate()
        bouncer.process.wait(timeout=10)
