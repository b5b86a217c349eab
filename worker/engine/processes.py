"""Child processes: a worker per CPU core under one supervisor, and the helpers the demo shares.

One Python process sends on one core (the GIL), so `mailroom worker --processes N` starts N
worker processes and supervises them: SIGTERM or SIGINT goes to every child, a child that dies
while the others run is started again (after a growing pause if it keeps dying), and with
`--drain` each child exits when nothing is due and none is replaced (a failed one makes the
exit status non-zero). The children coordinate
through PostgreSQL alone, exactly like workers on different hosts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType

log = logging.getLogger("mailroom.worker")


def die_with_parent() -> None:
    """In a child: get SIGTERM when the parent dies, even by SIGKILL (Linux; elsewhere nothing)."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def terminate(process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class _Child:
    index: int
    process: subprocess.Popen[bytes]
    started: float
    quick_deaths: int = 0


@dataclass
class Supervisor:
    """Runs `count` children, `argv(index)` each (a `python -m worker.cli.main` argument list)."""

    count: int
    argv: Callable[[int], list[str]]
    env: Mapping[str, str]
    drain: bool = False
    max_pause: float = 30.0
    # Called with the pid of each child reaped (the metrics directory forgets its live gauges).
    on_exit: Callable[[int], None] | None = None
    _children: dict[int, _Child] = field(default_factory=dict)
    _stopping: bool = False

    def _spawn(self, index: int, quick_deaths: int = 0) -> None:
        process = subprocess.Popen(
            [sys.executable, "-m", "worker.cli.main", *self.argv(index)],
            env=dict(self.env),
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
        self._children[process.pid] = _Child(index, process, time.monotonic(), quick_deaths)
        log.info("worker process %d started (pid %d)", index, process.pid)
        if self._stopping:
            # SIGTERM arrived while this child was being started, before `stop` could see it.
            self._signal(process)

    @staticmethod
    def _signal(process: subprocess.Popen[bytes]) -> None:
        # Not `poll()`: that would reap an exited child behind `run`'s waitpid, which then never sees it.
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)

    def stop(self, signum: int = signal.SIGTERM, frame: FrameType | None = None) -> None:
        """Stop every child: they finish in-flight sends within their grace period and exit."""
        self._stopping = True
        for child in list(self._children.values()):
            self._signal(child.process)

    def run(self) -> int:
        """Start the children and wait for them; 0 when every child that ended for good ended well."""
        previous = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        failed = 0
        try:
            for index in range(self.count):
                if not self._stopping:
                    self._spawn(index)
            while self._children:
                try:
                    pid, status = os.waitpid(-1, 0)
                except ChildProcessError:  # every child is already reaped: nothing left to wait for
                    break
                child = self._children.pop(pid, None)
                if child is None:
                    continue
                if self.on_exit is not None:
                    self.on_exit(pid)
                code = os.waitstatus_to_exitcode(status)
                child.process.returncode = code
                if self._stopping or self.drain:
                    failed += code != 0
                    continue
                # Died while the others run: start it again, pausing longer each time it dies within
                # a minute of starting.
                quick = child.quick_deaths + 1 if time.monotonic() - child.started < 60 else 0
                pause = min(self.max_pause, 2.0 ** (quick - 1)) if quick else 0.0
                log.warning(
                    "worker process %d (pid %d) exited with %d; starting it again in %.0f s",
                    child.index,
                    pid,
                    code,
                    pause,
                )
                if pause:
                    deadline = time.monotonic() + pause
                    while not self._stopping and time.monotonic() < deadline:
                        time.sleep(min(0.2, pause))
                if self._stopping:
                    failed += code != 0
                    continue
                self._spawn(child.index, quick)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for child in self._children.values():
                terminate(child.process)
        return 1 if failed else 0


def worker_argv(
    index: int,
    *,
    concurrency: int,
    batch_size: int,
    grace: float,
    drain: bool,
    producers: bool,
) -> list[str]:
    """The command line of worker process `index`: only the first one runs the producers."""
    argv = [
        "worker",
        "--concurrency",
        str(concurrency),
        "--batch-size",
        str(batch_size),
        "--grace",
        str(grace),
    ]
    if drain:
        argv.append("--drain")
    if not producers or index > 0:
        argv.append("--no-producers")
    return argv
