"""Start-up of the `mailroom` command, as an operator meets it (a new process, the console script of
this environment), in three figures, each the median of RUNS runs:

    python -m bench.startup [RUNS]

- `mailroom --help`: the whole command, from process start to exit;
- `mailroom worker --drain --no-producers` on an empty queue: start, check the schema, find nothing
  due, stop (what a short scheduled drain pays every time);
- the same with one email enqueued, to the moment the SMTP sink accepts it.
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


def whole_run(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from process start to exit of one `mailroom` command (which must succeed)."""
    started = time.monotonic()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.monotonic() - started


def report(name: str, times: list[float]) -> None:
    """One line per figure: each run, then median and best."""
    print(f"{name}: median {statistics.median(times):.3f} s, best {min(times):.3f} s")
    print("  runs: " + " ".join(f"{t:.3f}" for t in times))


def main() -> None:
    """Print each figure with its runs."""
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    script = Path(sys.executable).with_name("mailroom")
    with database() as url:
        env = {**os.environ, "MAILROOM_DATABASE_URL": url}
        whole_run([str(script), "--help"], env)  # the first run pays for cold file caches
        report("mailroom --help", [whole_run([str(script), "--help"], env) for _ in range(runs)])
        reset(url)
        drain = [str(script), "worker", "--drain", "--no-producers"]
        report("worker --drain, empty queue", [whole_run(drain, env) for _ in range(runs)])
        report("start-up to first email accepted", [one_run(url, script) for _ in range(runs)])


if __name__ == "__main__":
    main()
