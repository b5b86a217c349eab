"""`mailroom demo` on a terminal: the console in front of the whole stack; quitting stops everything."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from pathlib import Path

import psycopg


def _read_until(fd: int, wanted: bytes, seconds: float, seen: bytearray) -> bool:
    """Collect terminal output until `wanted` appears (True) or time runs out (False)."""
    deadline = time.monotonic() + seconds
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                seen.extend(os.read(fd, 65536))
            except OSError:  # the child closed the terminal
                return wanted in seen
    return True


def _sent_while_reading(fd: int, db_url: str, seconds: float, seen: bytearray) -> int:
    """Keep draining the terminal (so the console never blocks on it) until some email is sent."""
    deadline = time.monotonic() + seconds
    with psycopg.connect(db_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM mailroom.email_queue WHERE status = 'sent'").fetchone()
            if row is not None and row[0] > 0:
                return int(row[0])
            _read_until(fd, b"\x00never", 0.2, seen)
    return 0


def test_demo_runs_the_console_in_front_and_quitting_stops_everything(
    cli_env: dict[str, str], db_url: str
) -> None:
    script = Path(sys.executable).with_name("mailroom")
    env = {**cli_env, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: the demo, on a terminal
        os.execve(str(script), [str(script), "demo"], env)  # noqa: S606
    seen = bytearray()
    try:
        assert _read_until(fd, b"worker: pid ", 60, seen), seen.decode(errors="replace")
        assert _read_until(fd, b", log", 10, seen)
        worker_pid = int(seen.split(b"worker: pid ")[1].split(b",")[0])
        # The console is up and connected: its header says live.
        assert _read_until(fd, b"live", 60, seen), seen.decode(errors="replace")[-2000:]
        # Behind the console the feed and the worker run: email gets sent while the operator watches.
        assert _sent_while_reading(fd, db_url, 60, seen) > 0
        os.write(fd, b"q")
        _read_until(fd, b"\x00never", 30, seen)  # drain until the terminal closes
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen.decode(errors="replace")[-2000:]
    assert not Path(f"/proc/{worker_pid}").exists(), "the demo's worker outlived the console"
    with psycopg.connect(db_url) as conn:
        senders = conn.execute("SELECT name FROM mailroom.sender_accounts ORDER BY name").fetchall()
    assert senders == [("demo-low-limit",), ("demo-primary",)]
