"""What a due maintenance run costs the drain beside it, and the worker's memory:

    python -m bench.maintenance [EMAILS] [ROUNDS]

`mailroom worker --drain --concurrency 4` (producers on) over EMAILS emails to the sink, once with the
hourly maintenance due (its row in `mailroom.jobs` gone: retention and every sender's DNS check run
beside delivery) and once with it not due, alternating, ROUNDS times each. Prints each drain's rate and
the worker process's own resident memory when it ends (the maintenance child,
`worker.ops.maintenance_child`, is not the worker), then the medians. The sender's domain is example.org, so the DNS check asks the
resolvers this machine has.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import psycopg

from bench.common import database, sink_process
from bench.compare import ROOT, SECRET_KEY, prepare

# `mailroom worker --drain` in a process of its own, printing its resident memory (KiB, Linux) at the end:
# what a long-running worker keeps (its peak is set early, by start-up, whatever runs later).
_WORKER = (
    "import sys; from worker.cli.main import main; code = main(sys.argv[1:]);"
    " print([line.split()[1] for line in open('/proc/self/status') if line.startswith('VmRSS:')][0]);"
    " sys.exit(code)"
)


def drain(url: str, due: bool) -> tuple[float, int]:
    """One drain with maintenance due or not; its wall time and the worker's resident memory in KiB at the end."""
    with psycopg.connect(url, autocommit=True) as conn:
        if due:
            conn.execute("DELETE FROM mailroom.jobs WHERE name = 'retention'")
        else:
            conn.execute(
                "INSERT INTO mailroom.jobs (name, last_run_at) VALUES ('retention', now())"
                " ON CONFLICT (name) DO UPDATE SET last_run_at = now()"
            )
    env = {"MAILROOM_DATABASE_URL": url, "MAILROOM_SECRET_KEY": SECRET_KEY}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, "worker", "--drain", "--concurrency", "4"],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the worker failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, int(done.stdout.split()[-1])


def main() -> None:
    """Alternate due and not-due drains; print each, then the medians."""
    emails = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    runs: dict[str, list[tuple[float, int]]] = {"due": [], "not due": []}
    with database() as url, sink_process() as (port, kind):
        print(f"{emails} emails a drain, {rounds} rounds, sink: {kind}", flush=True)
        for number in range(1, rounds + 1):
            for label in runs:
                prepare(url, port, emails)
                elapsed, rss = drain(url, label == "due")
                runs[label].append((emails / elapsed, rss))
                print(f"round {number}, maintenance {label}: {emails / elapsed:,.0f} emails/s,"
                      f" worker resident at the end {rss / 1024:.0f} MiB", flush=True)  # fmt: skip
    for label, figures in runs.items():
        rate = statistics.median(r for r, _ in figures)
        rss = statistics.median(m for _, m in figures)
        print(
            f"maintenance {label}: median {rate:,.0f} emails/s, worker resident at the end {rss / 1024:.0f} MiB"
        )
    due = statistics.median(r for r, _ in runs["due"])
    print(f"due / not due: {due / statistics.median(r for r, _ in runs['not due']):.2f}")


if __name__ == "__main__":
    main()
