"""One maintenance run in a process of its own, for `mailroom worker` (`worker.ops.maintenance`).

Run in a thread, a maintenance run's imports and parsing held the worker's interpreter lock beside
delivery: the DNS check's checkdmarc alone is about a second of CPU, and a drain that met a due run
delivered 0.87-0.92 of the rate of one that did not (`bench.maintenance`, docs/performance.md). So the worker starts `python -m
worker.ops.maintenance_child`, hands it the run (the database URL, the settings, the database's time and
how to log) as a pickle on its standard input, and reads the report back the same way from its standard
output. The child logs to the standard error it shares with the worker; anything it would print goes
there too, so its standard output carries the report alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from worker.core.config import Settings

if TYPE_CHECKING:
    from worker.ops.retention import MaintenanceReport

log = logging.getLogger("worker.ops.maintenance")

LogSetup = tuple[bool, str] | None  # (verbose, format) as the worker logs, or None when it set up nothing


async def run_in_child(url: str, settings: Settings, now: datetime) -> MaintenanceReport:
    """Run maintenance in a child process and return its report; a child that fails raises RuntimeError.
    Cancelled (the worker stopping), the child is asked to stop (SIGTERM) and waited for. The child
    has a session of its own, so a Ctrl-C at the worker's terminal reaches the worker alone, which
    then stops the child this way, rather than a traceback from each."""
    payload = pickle.dumps((url, settings, now, _log_setup()))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, _ = await child.communicate(payload)
    except asyncio.CancelledError:
        if child.returncode is None:
            child.terminate()
            await asyncio.shield(child.wait())
        raise
    if child.returncode != 0:
        raise RuntimeError(f"the maintenance process exited with status {child.returncode}")
    report: MaintenanceReport = pickle.loads(out)  # noqa: S301 -- our own child's answer, on a pipe only it writes
    return report


def _log_setup() -> LogSetup:
    """How the worker logs, for the child to log alike (None: the worker set no handler up)."""
    from worker.core.logs import JsonFormatter

    root = logging.getLogger()
    if not root.handlers:
        return None
    json_lines = any(isinstance(h.formatter, JsonFormatter) for h in root.handlers)
    return root.level <= logging.DEBUG, "json" if json_lines else "text"


def run_here(url: str, settings: Settings, now: datetime) -> MaintenanceReport:
    """One maintenance run in this process: retention's steps, then, unless skipped, every sender's DNS."""
    from worker.core.db import connect
    from worker.ops.retention import run_maintenance

    with connect(url, autocommit=True) as conn:
        report = run_maintenance(conn, settings, now=now)
        if not report.skipped:
            _check_dns(conn, settings, report)
        return report


def _check_dns(conn: psycopg.Connection[Any], settings: Settings, report: MaintenanceReport) -> None:
    """Check every sender's DNS (`mailroom senders check`) once per run; a failure is the run's error, not the worker's."""
    from worker.ops.dns_checks import run_checks

    try:
        checks = run_checks(conn, settings)
    except Exception as exc:  # DNS checks must never stop maintenance or the worker
        report.errors.append(f"DNS checks of sender domains: {exc}")
        return
    for check in checks:
        if check.standing != "ok":
            log.warning(
                "sender %s DNS %s (mailroom senders check %s)", check.sender, check.standing, check.sender
            )


def main() -> None:
    """The child: read the run from standard input, run it, write the report to standard output."""
    answer = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the run prints goes to standard error, beside its logs
    sys.stdout = sys.stderr
    # A pipe only the worker that started this process writes (whoever can run this can run any Python).
    url, settings, now, log_setup = pickle.load(sys.stdin.buffer)  # noqa: S301
    if log_setup is not None:
        from worker.core.logs import configure_logging

        configure_logging(*log_setup)
    report = run_here(url, settings, now)
    with answer:
        answer.write(pickle.dumps(report))


if __name__ == "__main__":
    main()
