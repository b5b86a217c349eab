"""`mailroom worker`: deliver email, in one process or `--processes N` under a supervisor."""

from __future__ import annotations

import sys

import click

from worker.cli.framework import POSITIVE, Command, Database, with_database

DESCRIPTION = """\
Claim due email with FOR UPDATE SKIP LOCKED, send it over SMTP through the sender accounts, retry
with backoff, honour bounce and unsubscribe lists, record every attempt, and (unless
--no-producers) run the producers: lifecycle, birthdays, rendering and maintenance. Run one or many,
on any hosts. Wakes on NOTIFY; MAILROOM_LISTEN_DATABASE_URL lets the LISTEN connection bypass a
transaction-pooling PgBouncer. SIGTERM/SIGINT stop claiming, let in-flight sends finish within
--grace seconds and return the rest to the queue: nothing is lost.
Exit status 0 when stopped (or drained with --drain), 1 when a worker process failed or --drain
left email due that no sender can send (each sender's state is printed).

Examples:
  mailroom worker
  mailroom worker --processes 4 --concurrency 8
  mailroom worker --drain --no-producers"""


@click.command(cls=Command, help=DESCRIPTION)
@click.option(
    "--concurrency", type=POSITIVE, default=4, show_default=True, help="parallel SMTP connections per process"
)
@click.option(
    "--processes",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="worker processes to run under this one; a Python process sends on one CPU core, so use one per core. "
    "Only the first runs the producers; a process that dies is started again",
)
@click.option(
    "--batch-size",
    type=POSITIVE,
    default=300,
    show_default=True,
    help="emails claimed per slot at a time (a sender paced by send_delay_ms gets claims of at most 5 seconds of "
    "its sending)",
)
@click.option("--drain", is_flag=True, help="exit by itself when nothing is due")
@click.option(
    "--grace", type=float, default=10.0, show_default=True, help="seconds in-flight sends get on shutdown"
)
@click.option(
    "--producers/--no-producers",
    default=True,
    help="run the producers (lifecycle, birthdays, retention, ...) in this process, or deliver only",
)
@with_database
def worker(
    db: Database,
    concurrency: int,
    processes: int,
    batch_size: int,
    drain: bool,
    grace: float,
    producers: bool,
) -> int:
    """`mailroom worker`: claim, send and record email until SIGTERM/SIGINT (or, with --drain, until idle)."""
    if processes > 1:
        import os
        from functools import partial

        from worker.engine.processes import Supervisor, worker_argv

        argv = partial(
            worker_argv,
            concurrency=concurrency,
            batch_size=batch_size,
            grace=grace,
            drain=drain,
            producers=producers,
        )
        # The children use the server this process resolved (the embedded one included).
        env = {**os.environ, "MAILROOM_DATABASE_URL": db.url}
        code = Supervisor(processes, argv, env, drain=drain).run()
        print(f"worker: {processes} processes stopped", file=sys.stderr)
        return code
    import asyncio

    from worker.engine.delivery import WorkerOptions, run_worker

    options = WorkerOptions(concurrency=concurrency, batch_size=batch_size, drain=drain, grace_seconds=grace)
    chosen = []
    if producers:  # imported only when asked for: a delivery-only worker starts without them
        from worker.cli.wiring import worker_producers

        chosen = worker_producers()
    settings = db.settings
    sent = asyncio.run(run_worker(db.url, settings, options, settings.listen_database_url, chosen))
    print(f"worker: sent {sent} email(s)", file=sys.stderr)
    return _drained(db) if drain else 0


def _drained(db: Database) -> int:
    """After --drain: 0, or 1 with the reason when email is left due that no sender can send."""
    from worker.core.db import connect
    from worker.ops.health import undeliverable

    with connect(db.url) as conn:
        stuck = undeliverable(conn, db.settings)
    if stuck is None:
        return 0
    print(f"worker: {stuck.line}", file=sys.stderr)
    return 1
