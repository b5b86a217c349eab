"""`mailroom worker`: deliver email, in one process or `--processes N` under a supervisor."""

from __future__ import annotations

import click

from worker.cli.framework import Command, Database, number_option, with_database
from worker.cli.metrics_option import metrics_listen_option

DESCRIPTION = """\
Claim due email with FOR UPDATE SKIP LOCKED, send it over SMTP through the sender accounts, retry
with backoff, honour bounce and unsubscribe lists, record every attempt, and (unless
--no-producers) run the producers: lifecycle, birthdays, rendering and maintenance. Run one or many,
on any hosts. Wakes on NOTIFY; MAILROOM_LISTEN_DATABASE_URL lets the LISTEN connection bypass a
transaction-pooling PgBouncer. SIGTERM/SIGINT stop claiming, let in-flight sends finish within
--grace seconds and return the rest to the queue: nothing is lost.
--metrics-listen serves Prometheus metrics (/metrics) and the probes /healthz and /readyz on a
port of its own (with --processes, the supervisor serves every process's figures at once).
Exit status 0 when stopped (or drained with --drain), 1 when a worker process failed or --drain
left email due that no sender can send (each sender's state is printed).

Examples:
  mailroom worker
  mailroom worker --processes 4 --concurrency 8
  mailroom worker --processes 4 --metrics-listen 127.0.0.1:9464
  mailroom worker --drain --no-producers"""


@click.command(cls=Command, help=DESCRIPTION)
@number_option("--concurrency", default=4, show_default=True, help="parallel SMTP connections per process")
@number_option(
    "--processes",
    default=1,
    show_default=True,
    help="worker processes to run under this one; a Python process sends on one CPU core, so use one per core. "
    "Only the first runs the producers; a process that dies is started again",
)
@number_option(
    "--batch-size",
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
@metrics_listen_option(9464)
@click.option("--metrics-dir", hidden=True, help="(set by the supervisor) count into this directory")
@with_database
def worker(
    db: Database,
    concurrency: int,
    processes: int,
    batch_size: int,
    drain: bool,
    grace: float,
    producers: bool,
    metrics_listen: tuple[str, int] | None,
    metrics_dir: str | None,
) -> int:
    """`mailroom worker`: claim, send and record email until SIGTERM/SIGINT (or, with --drain, until idle)."""
    if processes > 1:
        return _supervise(db, processes, metrics_listen, concurrency, batch_size, grace, drain, producers)
    if metrics_dir:
        from worker.core.metrics import enable_for_supervisor

        enable_for_supervisor(metrics_dir)
    listener = None
    if metrics_listen:
        from worker.cli.metrics_option import start_listener
        from worker.ops.metrics_server import WORKER, serve_here

        listener = start_listener(metrics_listen, lambda h, p: serve_here(h, p, db.url, db.settings, WORKER))
        click.echo(f"worker: metrics on {_address(metrics_listen[0], listener.port)}", err=True)
    import asyncio

    from worker.engine.delivery import WorkerOptions, run_worker

    options = WorkerOptions(concurrency=concurrency, batch_size=batch_size, drain=drain, grace_seconds=grace)
    chosen = []
    if producers:  # imported only when asked for: a delivery-only worker starts without them
        from worker.cli.wiring import worker_producers

        chosen = worker_producers()
    settings = db.settings
    try:
        sent = asyncio.run(run_worker(db.url, settings, options, settings.listen_database_url, chosen))
    finally:
        if listener is not None:
            listener.close()
    click.echo(f"worker: sent {sent} email(s)", err=True)
    return _drained(db) if drain else 0


def _drained(db: Database) -> int:
    """After --drain: 0, or 1 with the reason when email is left due that no sender can send."""
    from worker.core.db import connect
    from worker.ops.health import undeliverable

    with connect(db.url) as conn:
        stuck = undeliverable(conn, db.settings)
    if stuck is None:
        return 0
    click.echo(f"worker: {stuck.line}", err=True)
    return 1


def _address(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _supervise(
    db: Database,
    processes: int,
    metrics_listen: tuple[str, int] | None,
    concurrency: int,
    batch_size: int,
    grace: float,
    drain: bool,
    producers: bool,
) -> int:
    """Run `processes` worker processes; with --metrics-listen, serve all their figures from here."""
    import functools
    import os
    import shutil
    import tempfile

    from worker.engine.processes import Supervisor, worker_argv

    directory = tempfile.mkdtemp(prefix="mailroom-metrics-") if metrics_listen else None

    def argv(index: int) -> list[str]:
        line = worker_argv(
            index,
            concurrency=concurrency,
            batch_size=batch_size,
            grace=grace,
            drain=drain,
            producers=producers,
        )
        return [*line, "--metrics-dir", directory] if directory else line

    # The children use the server this process resolved (the embedded one included).
    env = {**os.environ, "MAILROOM_DATABASE_URL": db.url}
    listener = None
    try:
        if metrics_listen and directory:
            from worker.cli.metrics_option import start_listener
            from worker.ops.metrics_server import serve_children

            listener = start_listener(
                metrics_listen, lambda h, p: serve_children(h, p, db.url, db.settings, directory)
            )
            where = _address(metrics_listen[0], listener.port)
            click.echo(f"worker: metrics on {where}", err=True)
        on_exit = None
        if directory:
            from worker.core.metrics import child_gone

            on_exit = functools.partial(child_gone, directory)
        code = Supervisor(processes, argv, env, drain=drain, on_exit=on_exit).run()
    finally:
        if listener is not None:
            listener.close()
        if directory:
            shutil.rmtree(directory, ignore_errors=True)
    click.echo(f"worker: {processes} processes stopped", err=True)
    return code
