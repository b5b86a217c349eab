"""CPU an idle worker uses: `python -m bench.idle_cpu [SECONDS]` runs `mailroom worker` with nothing to do.

It reads the worker's user+system CPU time from /proc (Linux) before and after the window
and prints it as a share of one core.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import database


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    """Start a worker, let it settle, measure its CPU over the window."""
    window = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    with database() as url:
        env = {**os.environ, "MAILROOM_DATABASE_URL": url}
        worker = subprocess.Popen(
            [sys.executable, "-m", "worker.cli.main", "worker"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(5)  # imports, pool, LISTEN
            before = cpu_seconds(worker.pid)
            time.sleep(window)
            used = cpu_seconds(worker.pid) - before
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    print(f"idle worker: {used:.2f} s of CPU in {window:.0f} s = {used / window:.2%} of one core")


if __name__ == "__main__":
    main()
