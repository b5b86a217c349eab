"""`mailroom worker`: deliver email, in one process or `--processes N` under a supervisor."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from worker.cli.argtypes import positive_count
from worker.core.config import Settings


def _url(settings: Settings) -> str:
    from worker.core.db import checked_url

    return checked_url(settings)


DESCRIPTION = """\
Claim due email with FOR UPDATE SKIP LOCKED, send it over SMTP through the sender accounts, retry
with backoff, honour bounce and unsubscribe lists, record every attempt, and (unless
--no-producers) run the producers: lifecycle, birthdays, rendering and maintenance. Run one or many,
on any hosts. Wakes on NOTIFY; MAILROOM_LISTEN_DATABASE_URL lets the LISTEN connection bypass a
transaction-pooling PgBouncer. SIGTERM/SIGINT stop claiming, let in-flight sends finish within
--grace seconds and return the rest to the queue: nothing is lost.
Exit status 0 when stopped (or drained with --drain), 1 when a worker process failed.

Examples:
  mailroom worker
  mailroom worker --processes 4 --concurrency 8
  mailroom worker --drain --no-producers"""


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom worker`: claim, send and record email until SIGTERM/SIGINT (or, with --drain, until idle)."""
    import asyncio

    from worker.cli.wiring import worker_producers
    from worker.engine.delivery import WorkerOptions, run_worker

    url = _url(settings)
    if args.processes > 1:
        import os
        from functools import partial

        from worker.engine.processes import Supervisor, worker_argv

        argv = partial(
            worker_argv,
            concurrency=args.concurrency,
            batch_size=args.batch_size,
            grace=args.grace,
            drain=args.drain,
            producers=args.producers,
        )
        # The children use the server this process resolved (the embedded one included).
        env = {**os.environ, "MAILROOM_DATABASE_URL": url}
        code = Supervisor(args.processes, argv, env, drain=args.drain).run()
        print(f"worker: {args.processes} processes stopped", file=sys.stderr)
        return code
    options = WorkerOptions(
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        drain=args.drain,
        grace_seconds=args.grace,
    )
    producers = worker_producers() if args.producers else []
    sent = asyncio.run(run_worker(url, settings, options, settings.listen_database_url, producers))
    print(f"worker: sent {sent} email(s)", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom worker`."""
    wk = sub.add_parser(
        "worker",
        help="deliver email (run one or many, on any hosts)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    wk.add_argument(
        "--concurrency",
        type=positive_count,
        default=4,
        help="parallel SMTP connections per process (default 4)",
    )
    wk.add_argument(
        "--processes",
        type=positive_count,
        default=1,
        help="worker processes to run under this one (default 1); a Python process sends on one CPU core, so "
        "use one per core. Only the first runs the producers; a process that dies is started again",
    )
    wk.add_argument(
        "--batch-size",
        type=positive_count,
        default=300,
        help="emails claimed per slot at a time (default 300; a sender paced by send_delay_ms gets claims of at "
        "most 5 seconds of its sending)",
    )
    wk.add_argument("--drain", action="store_true", help="exit by itself when nothing is due")
    wk.add_argument("--grace", type=float, default=10.0, help="seconds in-flight sends get on shutdown")
    wk.add_argument(
        "--no-producers",
        dest="producers",
        action="store_false",
        help="deliver only; do not run the producers (lifecycle, birthdays, retention, ...) in this process",
    )
    wk.set_defaults(handler=cmd_worker)
