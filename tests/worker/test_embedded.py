"""The embedded PostgreSQL is shared, reused after a crash, and never kept alive by dead processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from worker.core.embedded import EmbeddedPostgres, prune_dead_handles

# A Mailroom process holding the server: prints the postmaster pid, then waits for a line on stdin.
HOLDER = """
import sys
from pathlib import Path
from worker.core.embedded import EmbeddedPostgres
server = EmbeddedPostgres(Path(sys.argv[1]))
server.start()
print(server.running_pid(), flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def home(embedded_home: Path) -> Path:
    return embedded_home


def _holder(home: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip().isdigit(), f"holder failed to start: {line!r}"
    return proc, int(line)


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(timeout=60) == 0
    _close(proc)


def _close(proc: subprocess.Popen[str]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.e2e
def test_two_processes_share_one_server_which_stops_after_the_last(home: Path) -> None:
    first, pid_a = _holder(home)
    second, pid_b = _holder(home)
    assert pid_a == pid_b
    _release(first)
    assert _alive(pid_a)
    _release(second)
    assert EmbeddedPostgres(home).running_pid() is None


@pytest.mark.e2e
def test_server_left_by_a_killed_process_is_reused_then_stopped(home: Path) -> None:
    crashed, postmaster = _holder(home)
    crashed.send_signal(signal.SIGKILL)
    crashed.wait(timeout=30)
    _close(crashed)
    assert _alive(postmaster), "a SIGKILLed owner leaves its server running"

    survivor, reused = _holder(home)
    assert reused == postmaster, "the running server is reused, not duplicated"
    _release(survivor)
    assert EmbeddedPostgres(home).running_pid() is None, "the dead owner's handle no longer keeps it alive"


@pytest.mark.e2e
def test_prune_dead_handles_keeps_only_live_pids(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".handle_pids.json").write_text(f"[{os.getpid()}, {dead.pid}]")
    assert prune_dead_handles(tmp_path) == [dead.pid]
    assert (tmp_path / ".handle_pids.json").read_text() == f"[{os.getpid()}]"


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MAILROOM_DATABASE_URL"}
    env["MAILROOM_HOME"] = str(home)
    script = Path(sys.executable).with_name("mailroom")
    return subprocess.run(
        [str(script), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.e2e
def test_db_status_shows_the_server_and_who_uses_it_and_stop_never_pulls_it_from_under_them(
    home: Path,
) -> None:
    holder, pid = _holder(home)
    try:
        status = _cli(home, "db", "status")
        assert status.returncode == 0, status.stderr
        assert f"pid {pid}" in status.stdout and "embedded PostgreSQL 18" in status.stdout
        assert str((home / "pg").resolve()) in status.stdout
        assert f"used by 1 process(es): {holder.pid} " in status.stdout
        refused = _cli(home, "db", "stop")
        assert refused.returncode == 1 and "in use by 1 process(es)" in refused.stderr
        assert EmbeddedPostgres(home).running_pid() == pid  # still up for its user
    finally:
        _release(holder)


@pytest.mark.e2e
def test_db_stop_is_idempotent_and_forced_stop_stops_a_server_in_use(home: Path) -> None:
    holder, _ = _holder(home)
    try:
        forced = _cli(home, "db", "stop", "--force")
        assert forced.returncode == 0 and "stopped the embedded PostgreSQL" in forced.stdout
        assert EmbeddedPostgres(home).running_pid() is None
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
        _close(holder)
    again = _cli(home, "db", "stop")
    assert again.returncode == 0 and "no embedded PostgreSQL is running" in again.stdout
    assert _cli(home, "db", "status").stdout.startswith("no embedded PostgreSQL is running")


@pytest.mark.e2e
def test_a_command_started_while_the_server_stops_does_not_crash(home: Path) -> None:
    # A holder exits (its exit stops the server) while a command starts: the command waits for the
    # old server to be gone and starts a new one instead of failing an assertion of the library.
    for _ in range(3):
        holder, _ = _holder(home)
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        done = _cli(home, "db", "current")
        holder.wait(timeout=60)
        _close(holder)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
