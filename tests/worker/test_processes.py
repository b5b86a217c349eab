"""`mailroom worker --processes N`: several worker processes under one supervisor."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.worker.helpers import add_sender, statuses
from worker.devtools.sink import RunningSink


def _mailroom(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    script = Path(sys.executable).with_name("mailroom")
    return subprocess.Popen(
        [str(script), *args], env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _lines(proc: subprocess.Popen[str]) -> Iterator[str]:
    assert proc.stderr is not None
    yield from proc.stderr


def _bulk_enqueue(db_url: str, n: int) -> None:
    statement = "COPY mailroom.email_queue (recipient_email, subject, text_body) FROM STDIN"
    with psycopg.connect(db_url) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
        for i in range(n):
            copy.write_row((f"p{i}@example.com", f"Process test {i}", "body"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes; anything else still runs.
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.e2e
def test_two_processes_drain_the_queue_together(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    _bulk_enqueue(db_url, 400)
    with _mailroom(
        ["worker", "--processes", "2", "--concurrency", "2", "--batch-size", "10", "--drain"], cli_env
    ) as proc:
        output = "".join(_lines(proc))
        assert proc.wait(timeout=60) == 0, output[-3000:]
    started = re.findall(r"worker process (\d) started \(pid (\d+)\)", output)
    assert sorted(index for index, _ in started) == ["0", "1"]
    per_process = [int(n) for n in re.findall(r"worker: sent (\d+) email\(s\)", output)]
    assert len(per_process) == 2 and sum(per_process) == 400
    assert "worker: 2 processes stopped" in output
    assert statuses(db_url) == {"sent": 400}
    assert len({m.rcpt_tos[0] for m in smtp_sink.messages}) == 400


@pytest.mark.e2e
def test_a_killed_process_is_started_again_and_sigterm_stops_them_all(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    proc = _mailroom(["worker", "--processes", "2", "--concurrency", "1", "--no-producers"], cli_env)
    lines = _lines(proc)
    assert proc.stderr is not None
    pids: dict[str, int] = {}
    seen: list[str] = []
    try:
        for line in lines:
            seen.append(line)
            if found := re.search(r"worker process (\d) started \(pid (\d+)\)", line):
                pids[found[1]] = int(found[2])
            # Each child says it runs once its pool is open: then it has its signal handlers.
            if len(pids) == 2 and sum("started: 1 slots" in s for s in seen) == 2:
                break
        victim = pids["1"]
        os.kill(victim, signal.SIGKILL)
        for line in lines:
            seen.append(line)
            if found := re.search(r"worker process 1 started \(pid (\d+)\)", line):
                pids["1"] = int(found[1])
            if pids["1"] != victim and "started: 1 slots" in line:
                break
        assert any(f"(pid {victim}) exited with -9; starting it again" in s for s in seen), "".join(seen)
        proc.send_signal(signal.SIGTERM)
        seen.extend(lines)
        assert proc.wait(timeout=30) == 0, "".join(seen)[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert not any(_alive(pid) for pid in pids.values())
    assert "worker: 2 processes stopped" in "".join(seen)


@pytest.mark.e2e
def test_processes_must_be_a_whole_number_of_one_or_more(cli_env: dict[str, str]) -> None:
    with _mailroom(["worker", "--processes", "0"], cli_env) as proc:
        output = "".join(_lines(proc))
        assert proc.wait(timeout=30) == 2
    assert "0 is not in the range x>=1" in output


def test_stopping_never_reaps_a_child_behind_the_supervisors_back(cli_env: dict[str, str]) -> None:
    from worker.engine.processes import Supervisor

    supervisor = Supervisor(1, lambda index: ["--version"], cli_env)
    supervisor._spawn(0)
    (pid,) = supervisor._children
    # The child has exited; wait for that without reaping it, then stop (a second Ctrl-C, say).
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    supervisor.stop()
    # Still there for the supervisor's own waitpid, which is what counts it.
    reaped, status = os.waitpid(pid, 0)
    supervisor._children[pid].process.returncode = os.waitstatus_to_exitcode(status)
    assert reaped == pid


def test_a_child_started_after_sigterm_arrived_is_stopped_too(cli_env: dict[str, str]) -> None:
    from worker.engine.processes import Supervisor

    supervisor = Supervisor(1, lambda index: ["worker", "--no-producers"], cli_env)
    supervisor.stop()  # the signal came first, while the child was being started
    supervisor._spawn(0)
    (child,) = supervisor._children.values()
    # It stops (by the signal itself, or as a worker does on SIGTERM once its handlers are in place).
    assert child.process.wait(timeout=30) in (0, -signal.SIGTERM)


def test_the_supervisor_says_which_child_ended_so_its_live_metrics_are_forgotten(
    cli_env: dict[str, str],
) -> None:
    from worker.engine.processes import Supervisor

    ended: list[int] = []
    supervisor = Supervisor(2, lambda index: ["--version"], cli_env, drain=True, on_exit=ended.append)
    assert supervisor.run() == 0
    assert len(ended) == 2 and len(set(ended)) == 2 and os.getpid() not in ended
