"""Mailroom against its peers in one run: the same PostgreSQL server, the same SMTP sink, N emails each.

    python -m bench.peers [N] [--rounds R] [--concurrency C] [--rev REV]

The peers run from a virtualenv of their own, made on first use in the user's cache directory
(pip from the package index: Django 5.2, django-post-office 3.x, pgqueuer, aiosmtplib, psycopg,
asyncpg; none of them is a dependency of Mailroom). Each system gets its own database on one
PostgreSQL (MAILROOM_DATABASE_URL's server, else a throwaway embedded one) and sends to one sink
(Postfix's `smtp-sink` when installed, else `mailroom sink`). Before each run its N emails are
enqueued the way that system enqueues them, then its tables are vacuumed and analysed:

- Mailroom: COPY into mailroom.email_queue (as bench.compare does), then `mailroom worker --drain
  --concurrency C` in a new process, the producers on, as a user runs it; once as configured by
  default (the durable journal: each connection's accepted messages committed, and flushed to disk,
  before it sends the next) and once with MAILROOM_JOURNAL_DURABLE=false, nearer the peers, which
  record what was sent after a batch (post-office) or through a buffer (pgqueuer);
- django-post-office: `mail.send_many` in chunks of 1000 (bench/peers_django/enqueue.py), then
  `python -m django send_queued_mail --processes 2`, batches of 1000 (bench/peers_django/settings.py),
  Django's SMTP backend pointed at the sink;
- pgqueuer: its batch `Queries.enqueue`, then what `pgq run bench.peers_pgqueuer:create_pgqueuer
  --mode drain --batch-size 100` does (see bench/peers_pgqueuer.py for why not the command itself):
  one process, an entrypoint that sends each job with aiosmtplib over C connections kept open;
- the raw ceiling (stock aiosmtplib, pre-built bytes, no database) and Mailroom's pipelined SMTP path
  without a database, C connections each: bench.throughput's raw_ceiling and pipelined_ceiling.

A round runs all six, the order reversed every other round (a shared host slows whoever runs while
it is busy). Every sender must send all N (checked in its tables) or the benchmark stops. The
senders are timed from launch to exit, start-up included; for Mailroom and pgqueuer the rate over
the span of their sent messages is printed too (Mailroom's from send_logs, as bench.compare does;
pgqueuer's from its first and last accepted message). Printed: every round, each system's median
with its lowest and highest run, and for each Mailroom the ratios per round (median, spread, each
round): / post-office and / pgqueuer launch to exit, / pgqueuer over the spans, and its span rate /
the raw ceiling and / the pipelined ceiling (the ceilings have neither start-up nor a database).
The first run of the benchmark makes the peers' virtualenv (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import platformdirs
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.common import database, sink_process
from bench.compare import ROOT, drain, own_database, prepare, worktree
from bench.throughput import pipelined_ceiling, raw_ceiling

PEER_REQUIREMENTS = (
    "django>=5.2,<5.3",
    "django-post-office>=3,<4",
    "pgqueuer>=1,<2",
    "aiosmtplib>=5.1,<5.2",
    "psycopg[binary]>=3.2,<3.4",
    "asyncpg",
)
PEER_DISTRIBUTIONS = ("django", "django-post-office", "pgqueuer", "aiosmtplib", "psycopg", "asyncpg")
POST_OFFICE_PROCESSES = 2
PGQUEUER_BATCH = 100
MAILROOMS = ("mailroom", "mailroom, journal not durable")
SYSTEMS = (*MAILROOMS, "post-office", "pgqueuer", "raw ceiling", "pipelined ceiling")


@dataclass(frozen=True)
class Run:
    """One run: emails/s from launch to exit, over the span of the sent messages (0 if unknown), the
    wall seconds, and the sender's CPU (its processes', user + system, PostgreSQL's not) per email."""

    rate: float
    span_rate: float = 0.0
    wall: float = 0.0
    cpu_us: float = 0.0


def children_cpu() -> float:
    """CPU seconds of every process this one has reaped, and theirs (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def peers_python() -> Path:
    """The peers' virtualenv's interpreter, the virtualenv made (once per requirement set) if missing."""
    digest = hashlib.sha256(" ".join(PEER_REQUIREMENTS).encode()).hexdigest()[:12]
    home = Path(platformdirs.user_cache_dir("mailroom")) / f"bench-peers-{digest}"
    python = home / "bin" / "python"
    if (home / "ready").exists():
        return python
    shutil.rmtree(home, ignore_errors=True)
    print(f"making the peers' virtualenv in {home} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"pip could not install the peers:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    (home / "ready").touch()
    return python


def peer_versions(python: Path) -> str:
    """name version, ... of the peers as installed."""
    code = (
        "import importlib.metadata as m\n"
        f"print(', '.join(f'{{d}} {{m.version(d)}}' for d in {PEER_DISTRIBUTIONS!r}))"
    )
    done = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def peer_env(url: str, port: int) -> dict[str, str]:
    """The environment of a peer's process: this tree's bench/ importable, its database and the sink."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PEERS_DATABASE_URL": url,
        "PEERS_SMTP_PORT": str(port),
        "DJANGO_SETTINGS_MODULE": "bench.peers_django.settings",
    }


def fresh_database(admin_url: str, name: str) -> str:
    """An empty database `name` on the server, dropped first if it exists; its URL (asyncpg reads no
    key=value conninfo), with a socket directory as the `host` parameter."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(admin_url)
    host, port = str(params.get("host", "")), str(params.get("port", ""))
    query = {k: v for k, v in (("host", host), ("port", port)) if v and host.startswith("/")}
    netloc = "" if query else host + (f":{port}" if port else "")
    user = quote(str(params.get("user", "")), safe="")
    password = quote(str(params.get("password", "")), safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    return f"postgresql://{auth}{netloc}/{quote(name)}" + (f"?{urlencode(query)}" if query else "")


def peer(python: Path, env: dict[str, str], *argv: str) -> str:
    """Run a step in the peers' virtualenv from this tree's root; its output, or exit with its errors."""
    done = subprocess.run([str(python), *argv], env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return done.stdout


def timed(python: Path, env: dict[str, str], *argv: str) -> tuple[float, float, str]:
    """Seconds from launch to exit of a sender in the peers' virtualenv, its CPU seconds, its output."""
    cpu, started = children_cpu(), time.monotonic()
    out = peer(python, env, *argv)
    return time.monotonic() - started, children_cpu() - cpu, out


def vacuum(url: str, table: str) -> None:
    """VACUUM ANALYZE a freshly filled queue, as bench.compare does for Mailroom's."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))


def count(url: str, query: str) -> int:
    """One count from the database."""
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def post_office(python: Path, url: str, port: int, n: int) -> Run:
    """Enqueue N with post-office's bulk API, then time `send_queued_mail --processes 2`."""
    env = peer_env(url, port)
    with psycopg.connect(url) as conn:
        conn.execute("TRUNCATE post_office_log, post_office_email CASCADE")
    peer(python, env, "-m", "bench.peers_django.enqueue", str(n))
    vacuum(url, "post_office_email")
    with tempfile.TemporaryDirectory(prefix="mailroom-peers-") as work:
        wall, cpu, _ = timed(
            python,
            env,
            "-m",
            "django",
            "send_queued_mail",
            "--processes",
            str(POST_OFFICE_PROCESSES),
            "--lockfile",
            str(Path(work) / "post_office"),
        )
    sent = count(url, "SELECT count(*) FROM post_office_email WHERE status = 0")  # 0: sent
    if sent != n:
        sys.exit(f"post-office sent {sent} of {n}")
    return Run(n / wall, 0.0, wall, cpu / n * 1e6)


def pgqueuer(python: Path, url: str, port: int, n: int, concurrency: int) -> Run:
    """Enqueue N with pgqueuer's batch enqueue, then time `pgq run ... --mode drain`."""
    env = {**peer_env(url, port), "PEERS_SMTP_CONNECTIONS": str(concurrency)}
    with psycopg.connect(url) as conn:
        conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
    peer(python, env, "-m", "bench.peers_pgqueuer", "enqueue", str(n))
    vacuum(url, "pgqueuer")
    wall, cpu, out = timed(python, env, "-m", "bench.peers_pgqueuer", "run", str(PGQUEUER_BATCH))
    last_line = [line for line in out.splitlines() if line.startswith("sent=")][-1:]
    fields = dict(part.split("=", 1) for part in " ".join(last_line).split())
    sent, failed = int(fields.get("sent", 0)), int(fields.get("failed", 0))
    left = count(url, "SELECT count(*) FROM pgqueuer")
    if sent != n or failed or left:
        sys.exit(f"pgqueuer sent {sent} of {n}, {failed} failed, {left} jobs left")
    span = float(fields["last"]) - float(fields["first"])
    return Run(n / wall, sent / span if span else 0.0, wall, cpu / n * 1e6)


def mailroom(tree: Path, url: str, port: int, n: int, concurrency: int, durable: bool = True) -> Run:
    """COPY N in, then time `mailroom worker --drain` (producers on) as bench.compare runs it; with
    durable False, MAILROOM_JOURNAL_DURABLE=false (the journal's commits do not wait for the disk)."""
    prepare(url, port, n)
    saved = os.environ.get("MAILROOM_JOURNAL_DURABLE")
    os.environ["MAILROOM_JOURNAL_DURABLE"] = "true" if durable else "false"  # drain() passes os.environ on
    try:
        run = drain(tree, url, concurrency, True)
    finally:
        if saved is None:
            del os.environ["MAILROOM_JOURNAL_DURABLE"]
        else:
            os.environ["MAILROOM_JOURNAL_DURABLE"] = saved
    sent = count(url, "SELECT count(*) FROM mailroom.send_logs WHERE outcome = 'sent'")
    if sent != n:
        sys.exit(f"mailroom sent {sent} of {n}")
    return Run(n / run.wall, run.rate, run.wall, run.cpu_us_per_email)


def set_up_peers(python: Path, admin_url: str, port: int) -> tuple[str, str]:
    """A database for post-office (migrated) and one for pgqueuer (installed)."""
    post_office_url = fresh_database(admin_url, "peers_post_office")
    peer(python, peer_env(post_office_url, port), "-m", "django", "migrate", "-v", "0")
    pgqueuer_url = fresh_database(admin_url, "peers_pgqueuer")
    pgq = str(python.with_name("pgq"))
    peer(python, {**peer_env(pgqueuer_url, port), "PGDSN": pgqueuer_url}, pgq, "install")
    return post_office_url, pgqueuer_url


def spread(values: list[float]) -> str:
    """median (lowest-highest)."""
    fmt = "{:,.2f}" if max(values) < 100 else "{:,.0f}"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def report(runs: dict[str, list[Run]]) -> None:
    """Medians with their spread, then the ratios per round."""
    print("\nmedians (lowest-highest run):")
    for name, done in runs.items():
        line = f"  {name}: {spread([r.rate for r in done])} emails/s"
        if done[0].wall:
            line += f" launch to exit, wall {spread([r.wall for r in done])} s"
            line += f", sender CPU {spread([r.cpu_us for r in done])} µs an email"
        if done[0].span_rate:
            outside = [r.wall * (1 - r.rate / r.span_rate) for r in done]
            line += f"\n      over the span of its sends {spread([r.span_rate for r in done])} emails/s"
            line += f"; outside that span (start-up, first claim, exit) {spread(outside)} s"
        print(line)
    print("ratios per round, median (lowest-highest), then each round:")
    for ours in MAILROOMS:
        pairs = [  # issue 35's goals in the labels
            ("/ post-office, launch to exit (goal >= 3)", "rate", "post-office", "rate"),
            ("/ pgqueuer, launch to exit (goal >= 6)", "rate", "pgqueuer", "rate"),
            ("/ pgqueuer, span rates", "span_rate", "pgqueuer", "span_rate"),
            ("span rate / raw ceiling (goal >= 1.2)", "span_rate", "raw ceiling", "rate"),
            ("span rate / pipelined ceiling (goal >= 0.5)", "span_rate", "pipelined ceiling", "rate"),
        ]
        for label, mine, other, theirs in pairs:
            each = [
                getattr(a, mine) / getattr(b, theirs)
                for a, b in zip(runs[ours], runs[other], strict=True)
                if getattr(b, theirs)
            ]
            rounds = " ".join(f"{x:.2f}" for x in each)
            print(f"  {ours} {label}: {spread(each)}   [{rounds}]")


def rounds(systems: dict[str, Callable[[], Run]], count: int) -> dict[str, list[Run]]:
    """Every system once a round, the order reversed every other round; each round printed."""
    runs: dict[str, list[Run]] = {name: [] for name in SYSTEMS}
    for round_ in range(count):
        order = list(SYSTEMS) if round_ % 2 == 0 else list(reversed(SYSTEMS))
        for name in order:
            runs[name].append(systems[name]())
        print(
            f"round {round_ + 1}: "
            + ", ".join(
                f"{name} {runs[name][-1].rate:,.0f}/s"
                + (f" (span {runs[name][-1].span_rate:,.0f}/s)" if runs[name][-1].span_rate else "")
                for name in SYSTEMS
            ),
            flush=True,
        )
    return runs


def main() -> None:
    """Set up, run the rounds, print the figures."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("emails", nargs="?", type=int, default=3000, help="emails a run (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, order reversed each round (default 3)")
    parser.add_argument("--concurrency", type=int, default=4, help="SMTP connections (default 4)")
    parser.add_argument(
        "--rev",
        help="run Mailroom's worker from this commit (a temporary git worktree, its own database migrated"
        " by its own code) instead of the working tree, e.g. HEAD while the tree holds unfinished edits",
    )
    args = parser.parse_args()
    n, c = args.emails, args.concurrency
    python = peers_python()
    print(f"peers: {peer_versions(python)}")
    with contextlib.ExitStack() as stack:
        tree = stack.enter_context(worktree(args.rev)) if args.rev else ROOT
        url = stack.enter_context(database())
        port, kind = stack.enter_context(sink_process())
        admin = make_conninfo(url, dbname="postgres")
        if args.rev:
            url = own_database(admin, "peers_mailroom", tree)
        post_office_url, pgqueuer_url = set_up_peers(python, admin, port)
        systems: dict[str, Callable[[], Run]] = {
            "mailroom": lambda: mailroom(tree, url, port, n, c),
            "mailroom, journal not durable": lambda: mailroom(tree, url, port, n, c, durable=False),
            "post-office": lambda: post_office(python, post_office_url, port, n),
            "pgqueuer": lambda: pgqueuer(python, pgqueuer_url, port, n, c),
            "raw ceiling": lambda: Run(asyncio.run(raw_ceiling(port, n, c))),
            "pipelined ceiling": lambda: Run(asyncio.run(pipelined_ceiling(port, n, c))),
        }
        print(
            f"mailroom: {args.rev or 'the working tree'}; sink: {kind}; {n} emails a run; {c} SMTP connections"
            f" (post-office: {POST_OFFICE_PROCESSES} processes of 5 threads); {args.rounds} rounds"
        )
        report(rounds(systems, args.rounds))


if __name__ == "__main__":
    main()
