"""Start-up of the `mailroom` command, as an operator meets it (a new process, the console script of
this environment), in three figures, each the median of RUNS runs:

    python -m bench.startup [RUNS]
    python -m bench.startup RUNS --against REV     the first two figures beside those of commit REV

With --against, both trees run as `python -m console.cli` from their own checkout (REV's in a
temporary git worktree), one run of each in turn, so a busy host slows both alike.

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
import tempfile
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


def whole_run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """Seconds from process start to exit of one `mailroom` command (which must succeed)."""
    started = time.monotonic()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.monotonic() - started


def report(name: str, times: list[float]) -> None:
    """One line per figure: each run, then median and best."""
    print(f"{name}: median {statistics.median(times):.3f} s, best {min(times):.3f} s")
    print("  runs: " + " ".join(f"{t:.3f}" for t in times))


def compare(runs: int, revision: str) -> None:
    """`--help` and an empty drain of this tree and of `revision`, run in turn."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="mailroom-startup-") as work, database() as url:
        other = Path(work) / "tree"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "-q", "--detach", str(other), revision], check=True
        )
        try:
            for argv in (["--help"], ["worker", "--drain", "--no-producers"]):
                times: dict[str, list[float]] = {revision: [], "this tree": []}
                for _ in range(runs):
                    for name, tree in ((revision, other), ("this tree", root)):
                        env = {**os.environ, "MAILROOM_DATABASE_URL": url, "PYTHONPATH": str(tree)}
                        times[name].append(
                            whole_run([sys.executable, "-m", "console.cli", *argv], env, cwd=tree)
                        )
                for name, figures in times.items():
                    report(f"mailroom {' '.join(argv)} ({name})", figures)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(other)], check=True)


def main() -> None:
    """Print each figure with its runs."""
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    if len(sys.argv) > 3 and sys.argv[2] == "--against":
        compare(runs, sys.argv[3])
        return
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
