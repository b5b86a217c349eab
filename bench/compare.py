"""Delivery throughput of this tree beside an earlier commit's, run in turn on one server and one sink:
the guard that shows a slowdown before it lands.

    python -m bench.compare REV [--rounds R] [--emails N] [--concurrency C] [--no-producers]

REV's tree is checked out in a temporary git worktree. Each tree gets its own database on the same
PostgreSQL (migrated by its own code, so a newer schema never meets older code) and both send to the
same sink (Postfix's `smtp-sink` when installed, else `mailroom sink`). A round runs each tree once,
in alternating order, as operators run it: `mailroom worker --drain --concurrency C` in a new
process (the producers on unless --no-producers), N emails enqueued first with COPY. Per run:

- emails/s over the span of the sent attempts in send_logs (process start-up is not delivery);
- the worker process's CPU seconds (user + system, from wait4), per email;
- the database server's CPU seconds per email (its postmaster and every backend, from /proc), when the
  server runs on this machine: on a host of few cores the worker and PostgreSQL share them, so a
  server that spends more on an email slows delivery as much as a worker that does.

It prints every run, each tree's median, and the ratio this tree / REV per round with its spread
(lowest and highest round). A ratio whose highest round is below 1 is a loss beyond the noise:
docs/development.md says what to do about it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.common import bulk_enqueue, database, postmaster_pid, server_cpu_seconds, sink_process
from worker.core.crypto import generate_key

ROOT = Path(__file__).resolve().parents[1]
THIS = "this tree"


@dataclass(frozen=True)
class Run:
    """One drain: its delivery rate and the worker's CPU per email."""

    rate: float
    cpu_us_per_email: float
    wall: float
    server_us_per_email: float | None = None


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """REV checked out beside this tree, removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="mailroom-compare-"))
    tree = work / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), revision], check=True
    )
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(work, ignore_errors=True)


# Signed Message-IDs, as deployed: one key for both trees.
SECRET_KEY = generate_key()


def tree_env(tree: Path, url: str) -> dict[str, str]:
    """The environment that runs `tree`'s code (its packages first on sys.path) against `url`."""
    return {
        **os.environ,
        "MAILROOM_DATABASE_URL": url,
        "PYTHONPATH": str(tree),
        "MAILROOM_SECRET_KEY": SECRET_KEY,
    }


def own_database(admin_url: str, name: str, tree: Path) -> str:
    """A fresh database on the server, migrated by `tree`'s own `mailroom db upgrade`."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(admin_url, dbname=name)
    subprocess.run(
        [sys.executable, "-m", "worker.cli.main", "db", "upgrade"],
        env=tree_env(tree, url),
        cwd=tree,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return url


def prepare(url: str, port: int, emails: int) -> None:
    """An empty queue, one sender account to the sink (plain SQL, the same in every revision), N emails."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "TRUNCATE mailroom.email_queue, mailroom.send_logs, mailroom.sender_usage,"
            " mailroom.sender_accounts CASCADE"
        )
        conn.execute(
            "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security,"
            " daily_limit, max_connections) VALUES ('bench', 'bench@example.org', '127.0.0.1', %s, 'none',"
            " 10000000, 64)",
            (port,),
        )
    bulk_enqueue(url, emails)  # vacuumed and analyzed, as autovacuum leaves a queue loaded in bulk


def local_postmaster(url: str) -> int | None:
    """The server's postmaster when it runs on this machine (its CPU is readable), else None."""
    host = conninfo_to_dict(url).get("host") or os.environ.get("PGHOST") or "/"
    if not (str(host).startswith("/") or host in ("localhost", "127.0.0.1", "::1")):
        return None
    try:
        pid = postmaster_pid(url)
        with open(f"/proc/{pid}/comm", encoding="ascii", errors="replace") as comm:
            if not comm.read().startswith("postgres"):
                return None  # a server in a container: its backend's pid names another process here
        server_cpu_seconds(pid)  # readable, children and all
    except OSError:
        return None
    return pid


def drain(tree: Path, url: str, concurrency: int, producers: bool, postmaster: int | None = None) -> Run:
    """One `mailroom worker --drain` of `tree` in its own process: rate, CPU per email (the worker's, and
    the server's when `postmaster` is given), wall seconds."""
    argv = [sys.executable, "-m", "worker.cli.main", "worker", "--drain", "--concurrency", str(concurrency)]
    if not producers:
        argv.append("--no-producers")
    server_before = server_cpu_seconds(postmaster) if postmaster is not None else 0.0
    with tempfile.TemporaryFile() as log:
        started = time.monotonic()
        proc = subprocess.Popen(
            argv, env=tree_env(tree, url), cwd=tree, stdout=subprocess.DEVNULL, stderr=log
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if proc.returncode != 0:
            log.seek(0)
            sys.exit(f"the worker of {tree} failed:\n{log.read().decode(errors='replace')[-4000:]}")
    server = server_cpu_seconds(postmaster) - server_before if postmaster is not None else None
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(attempted_at) - min(attempted_at))"
            " FROM mailroom.send_logs WHERE outcome = 'sent'"
        ).fetchone()
    assert row is not None
    sent, span = int(row[0]), float(row[1] or 0.0)
    if sent == 0:
        sys.exit(f"the worker of {tree} sent nothing")
    cpu = usage.ru_utime + usage.ru_stime
    return Run(
        sent / span if span else 0.0, cpu / sent * 1e6, wall, None if server is None else server / sent * 1e6
    )


def summary(name: str, runs: list[Run]) -> None:
    """Each run, then the medians."""
    servers = [r.server_us_per_email for r in runs if r.server_us_per_email is not None]
    server = f", server CPU {statistics.median(servers):,.0f} µs/email" if servers else ""
    print(
        f"{name}: median {statistics.median(r.rate for r in runs):,.0f} emails/s,"
        f" worker CPU {statistics.median(r.cpu_us_per_email for r in runs):,.0f} µs/email{server},"
        f" wall {statistics.median(r.wall for r in runs):.2f} s"
    )
    print("  runs: " + "  ".join(f"{r.rate:,.0f}/s {r.cpu_us_per_email:,.0f}µs" for r in runs))


def ratios(label: str, mine: list[float], theirs: list[float]) -> None:
    """This tree / REV per round: the median and the spread."""
    each = sorted(a / b for a, b in zip(mine, theirs, strict=True) if b)
    print(f"{label}: median {statistics.median(each):.2f}, rounds from {each[0]:.2f} to {each[-1]:.2f}")


def main() -> None:
    """Run the rounds and print the comparison."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("revision", help="the commit to compare with (e.g. HEAD~1)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--emails", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--no-producers", dest="producers", action="store_false")
    args = parser.parse_args()
    with worktree(args.revision) as other, database() as url, sink_process() as (port, kind):
        admin = make_conninfo(url, dbname="postgres")
        postmaster = local_postmaster(url)
        trees = {args.revision: other, THIS: ROOT}
        urls = {
            name: own_database(admin, f"mailroom_compare_{i}", tree)
            for i, (name, tree) in enumerate(trees.items())
        }
        print(
            f"sink: {kind}; {args.emails} emails a run; concurrency {args.concurrency};"
            f" producers {'on' if args.producers else 'off'}; {args.rounds} rounds"
        )
        runs: dict[str, list[Run]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in order:
                prepare(urls[name], port, args.emails)
                runs[name].append(
                    drain(trees[name], urls[name], args.concurrency, args.producers, postmaster)
                )
            print(
                f"round {round_ + 1}: " + ", ".join(f"{n} {runs[n][-1].rate:,.0f}/s" for n in trees),
                flush=True,
            )
        for name in trees:
            summary(name, runs[name])
        ratios(
            f"rate, {THIS} / {args.revision}",
            [r.rate for r in runs[THIS]],
            [r.rate for r in runs[args.revision]],
        )
        ratios(
            f"worker CPU per email, {THIS} / {args.revision}",
            [r.cpu_us_per_email for r in runs[THIS]],
            [r.cpu_us_per_email for r in runs[args.revision]],
        )
        if postmaster is not None:
            ratios(
                f"server CPU per email, {THIS} / {args.revision}",
                [r.server_us_per_email or 0.0 for r in runs[THIS]],
                [r.server_us_per_email or 0.0 for r in runs[args.revision]],
            )


if __name__ == "__main__":
    main()
