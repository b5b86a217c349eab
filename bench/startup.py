"""Start-up: from `mailroom worker --drain` starting to the first email accepted by the SMTP server.

    python -m bench.startup [RUNS]

Each run enqueues one email, starts `mailroom worker --drain --no-producers --concurrency 1` as an
operator would (a new process, the console script of this environment), and times the moment the
sink accepts the message, read from the sink's log line. A short `--drain` run pays this every time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench.common import add_bench_sender, database, reset
from worker.devtools.sink import start_sink


def one_run(url: str, script: Path) -> float:
    """Seconds from process start to the first accepted message."""
    reset(url)
    sink = start_sink("127.0.0.1", 0)
    try:
        add_bench_sender(url, sink.port)
        with psycopg.connect(url) as conn:
            conn.execute(
                "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body)"
                " VALUES ('first@example.com', 'Start-up', 'body')"
            )
        env = {**os.environ, "MAILROOM_DATABASE_URL": url}
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(script), "worker", "--drain", "--no-producers", "--concurrency", "1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert sink.wait_for_sync(1, timeout=30), "nothing arrived"
        first = time.monotonic() - started
        proc.wait(timeout=30)
        return first
    finally:
        sink.stop()


def main() -> None:
    """Print each run and the median."""
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    script = Path(sys.executable).with_name("mailroom")
    with database() as url:
        times = [one_run(url, script) for _ in range(runs)]
    print(" ".join(f"{t:.3f}" for t in times))
    print(
        f"start-up to first email accepted: median {statistics.median(times):.3f} s, best {min(times):.3f} s"
    )


if __name__ == "__main__":
    main()
