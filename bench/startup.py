"""Start-up of the `mailroom` command, as an operator meets it (a new process, the console script of
this environment), in four figures, each the median of RUNS runs:

    python -m bench.startup [RUNS]
    python -m bench.startup RUNS --against REV     the first three figures beside those of commit REV

With --against, both trees run as `python -m console.cli` from their own checkout (REV's in a
temporary git worktree), each on a database of its own on one PostgreSQL (migrated by its own code,
so a newer schema never meets older code), one run of each in turn, so a busy host slows both alike.

- `mailroom --help`: the whole command, from process start to exit;
- `mailroom worker --drain --no-producers` on an empty queue: start, check the schema, find nothing
  due, stop (what a short scheduled drain pays every time);
- `mailroom worker --drain` on an empty queue: the same with the producers on (the default), each
  doing its first round of due work (none) before the drain ends;
- `--drain --no-producers` with one email enqueued, to the moment the SMTP sink accepts it.

Each figure is preceded by one run that is not counted (cold file caches, a first round of
producers' daily work). The commands run with Python's bytecode cache on, as an installed
Mailroom does (an environment's PYTHONDONTWRITEBYTECODE would make every run compile every module).
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

# What each figure runs, after `mailroom`; the first three are compared with --against.
HELP = ["--help"]
DRAIN = ["worker", "--drain", "--no-producers"]
DRAIN_PRODUCERS = ["worker", "--drain"]


def environment(url: str, tree: Path | None = None) -> dict[str, str]:
    """The commands' environment: this one with `url`, bytecode cached, and `tree`'s code first."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["MAILROOM_DATABASE_URL"] = url
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


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
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(script), *DRAIN, "--concurrency", "1"],
            env=environment(url),
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
    """`--help` and the two empty drains of this tree and of `revision`, run in turn."""
    from bench.compare import own_database, worktree

    root = Path(__file__).resolve().parents[1]
    with worktree(revision) as other, database() as admin:
        trees = {revision: other, "this tree": root}
        envs = {
            name: environment(own_database(admin, f"mailroom_startup_{i}", tree), tree)
            for i, (name, tree) in enumerate(trees.items())
        }
        for argv in (HELP, DRAIN, DRAIN_PRODUCERS):
            times: dict[str, list[float]] = {name: [] for name in trees}
            for name, tree in trees.items():  # not counted: cold caches, bytecode, first rounds
                whole_run([sys.executable, "-m", "console.cli", *argv], envs[name], cwd=tree)
            for _ in range(runs):
                for name, tree in trees.items():
                    times[name].append(
                        whole_run([sys.executable, "-m", "console.cli", *argv], envs[name], cwd=tree)
                    )
            for name, figures in times.items():
                report(f"mailroom {' '.join(argv)} ({name})", figures)


def main() -> None:
    """Print each figure with its runs."""
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    if len(sys.argv) > 3 and sys.argv[2] == "--against":
        compare(runs, sys.argv[3])
        return
    script = Path(sys.executable).with_name("mailroom")
    with database() as url:
        env = environment(url)
        figures = (
            ("mailroom --help", HELP),
            ("worker --drain --no-producers, empty queue", DRAIN),
            ("worker --drain (producers on), empty queue", DRAIN_PRODUCERS),
        )
        for name, argv in figures:
            reset(url)
            whole_run([str(script), *argv], env)  # not counted: cold caches, first rounds
            report(name, [whole_run([str(script), *argv], env) for _ in range(runs)])
        report("start-up to first email accepted", [one_run(url, script) for _ in range(runs)])


if __name__ == "__main__":
    main()
