"""The `mailroom` command line: one entry point for operators, scripts and the demo."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import pathlib
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO

from worker import __version__
from worker.cli.commands import Registrar
from worker.cli.commands.accounts import positive_count
from worker.core.config import ConfigError, Settings
from worker.core.logs import configure_logging, log_format
from worker.core.validation import ValidationError

log = logging.getLogger("mailroom")

Handler = Callable[[argparse.Namespace, Settings], int]


def _url(settings: Settings) -> str:
    from worker.core.db import database_url

    return database_url(settings)


def cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom db upgrade|downgrade|current|url|serve|stop`."""
    from worker.core import db

    if args.db_command == "stop":
        server = db.embedded_server(settings)
        if server.running_pid() is None:
            print("no embedded PostgreSQL is running in", server.pgdata)
            return 0
        server.start()
        server.stop()
        print("stopped the embedded PostgreSQL in", server.pgdata)
        return 0
    url = db.database_url(settings, migrate=False)
    if args.db_command == "upgrade":
        ran = db.upgrade(url, args.revision)
        print(f"database at {db.current_revision(url)}" + ("" if ran else " (already up to date)"))
    elif args.db_command == "downgrade":
        db.downgrade(url, args.revision)
        print(f"database at {db.current_revision(url) or 'base'}")
    elif args.db_command == "current":
        print(db.current_revision(url) or "base (Mailroom is not installed in this database)")
    elif args.db_command == "url":
        db.upgrade(url)
        print(url)
        if not settings.database_url:
            print(
                "(the embedded server runs while a Mailroom process uses it; `mailroom db serve` keeps it up)",
                file=sys.stderr,
            )
    elif args.db_command == "serve":
        db.upgrade(url)
        print(url, flush=True)
        print("embedded PostgreSQL is up; Ctrl-C stops it", file=sys.stderr, flush=True)
        _wait_for_signal()
    return 0


def _wait_for_signal() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            signal.pause()


def _open_input(path: str) -> IO[str]:
    if path == "-":
        return sys.stdin
    return open(path, encoding="utf-8")


def _numbered_lines(handle: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(handle, start=1):
        if line.strip():
            yield number, line


def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom enqueue [PATH|-]`: JSON lines in, one JSON result line out per input line."""
    from worker.core.bulk import Results, enqueue_lines

    url = _url(settings)
    started = time.monotonic()
    out = sys.stdout
    done = 0

    def emit(results: Results) -> None:
        nonlocal done
        out.write("".join(text + "\n" for _, text in results))
        out.flush()
        done += len(results)
        if args.progress:
            rate = done / max(time.monotonic() - started, 1e-9)
            print(f"enqueue: {done} lines done ({rate:,.0f} lines/s)", file=sys.stderr, flush=True)

    try:
        handle = _open_input(args.path)
    except OSError as exc:
        raise ConfigError(f"cannot read {args.path}: {exc.strerror}") from None
    with handle:
        counts = enqueue_lines(url, _numbered_lines(handle), settings, emit, args.batch_size, args.jobs)
    elapsed = time.monotonic() - started
    print(
        f"enqueue: {counts.accepted} accepted, {counts.rejected} rejected in {elapsed:.2f}s", file=sys.stderr
    )
    return 1 if counts.rejected else 0


def _password_from(args: argparse.Namespace) -> str | None:
    if args.password_env:
        value = os.environ.get(args.password_env)
        if value is None:
            raise ConfigError(f"environment variable {args.password_env} is not set")
        return value
    if args.password_prompt:
        import getpass

        return getpass.getpass(f"SMTP password for {args.username or args.name}: ")
    return None


def cmd_senders(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom senders add|list|pause|resume|suspend`."""
    from worker.core.crypto import secret_box
    from worker.core.db import connect
    from worker.ops.senders import SenderSpec, add_sender, list_senders, set_sender_status

    if args.senders_command == "add":
        password = _password_from(args)
        box = secret_box(settings)
        spec = SenderSpec(
            name=args.name,
            from_email=args.from_email,
            from_name=args.from_name,
            smtp_host=args.host,
            smtp_port=args.port,
            smtp_security=args.security,
            smtp_username=args.username,
            daily_limit=args.daily_limit,
            warmup_stage=args.warmup_stage,
            warmup_limit=args.warmup_limit,
            send_delay_ms=args.send_delay_ms,
            max_connections=args.max_connections,
            dkim_domain=args.dkim_domain,
            dkim_selector=args.dkim_selector,
        )
        dkim_key = None
        if args.dkim_key_file:
            try:
                dkim_key = args.dkim_key_file.read_bytes()
            except OSError as exc:
                raise ConfigError(f"cannot read the DKIM key file: {exc}") from None
        with connect(_url(settings)) as conn:
            sender_id = add_sender(conn, spec, password, box, dkim_key)
        print(f"added sender account {args.name} (id {sender_id})")
        if dkim_key is not None:
            from worker.core.dkim import dns_record, normalise_private_key

            print(f"DKIM: publish this TXT record at {args.dkim_selector}._domainkey.{args.dkim_domain}:")
            print(dns_record(normalise_private_key(dkim_key)))
        return 0
    with connect(_url(settings)) as conn:
        if args.senders_command == "list":
            rows = list_senders(conn)
            if args.json:
                print(json.dumps(rows, default=str, indent=2))
            else:
                print(f"{'NAME':<20} {'STATUS':<22} {'TODAY':>13} {'WARM-UP':<20} {'HOST':<30}")
                for r in rows:
                    today = f"{r['sent_today']}/{r['effective_limit']}"
                    # Stage 0 is a finished (or never started) warm-up: its old limit no longer applies.
                    warmup = (
                        f"stage {r['warmup_stage']}/5 {r['warmup_limit']}/day" if r["warmup_stage"] else "-"
                    )
                    print(
                        f"{r['name']:<20} {r['status']:<22} {today:>13} {warmup:<20}"
                        f" {r['smtp_host']}:{r['smtp_port']}"
                    )
            return 0
        target = {"pause": "paused", "resume": "active", "suspend": "suspended"}[args.senders_command]
        try:
            status = set_sender_status(conn, args.name, target, getattr(args, "reason", None))
        except (LookupError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(f"sender account {args.name} is now {status}")
    return 0


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom stats [--json]`."""
    from worker.core.db import connect
    from worker.ops.stats import queue_stats

    with connect(_url(settings)) as conn:
        stats = queue_stats(conn)
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    print("queue:  " + "  ".join(f"{k} {v}" for k, v in stats["queue"].items()))
    oldest = stats["oldest_pending_seconds"]
    print(
        f"due now {stats['due_now']}  scheduled later {stats['scheduled_later']}  retrying {stats['retrying']}"
        f"  oldest pending {'-' if oldest is None else f'{oldest:.0f}s'}"
    )
    for s in stats["senders"]:
        print(
            f"sender {s['name']}: {s['status']}, {s['sent_today']}/{s['limit_today']} today, "
            f"{s['bounces_today']} bounces, {s['errors_today']} errors"
        )
    return 0


def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom retry ID...|--all-failed`."""
    from worker.core.db import connect
    from worker.ops.actions import retry, retry_all_failed

    if not args.ids and not args.all_failed:
        raise ConfigError("give email ids or --all-failed")
    with connect(_url(settings)) as conn:
        result = retry_all_failed(conn) if args.all_failed else retry(conn, args.ids)
    print(result.summary("retried"))
    return 1 if result.skipped else 0


def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom cancel ID...`."""
    from worker.core.db import connect
    from worker.ops.actions import cancel

    with connect(_url(settings)) as conn:
        result = cancel(conn, args.ids)
    print(result.summary("cancelled"))
    return 1 if result.skipped else 0


def cmd_sink(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom sink`: the local SMTP server that catches what Mailroom sends."""
    import asyncio

    from worker.devtools.sink import serve_forever

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(host=args.host, port=args.port, maildir=args.maildir))
    return 0


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


def cmd_keygen(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom keygen`: print a new MAILROOM_SECRET_KEY."""
    from worker.core.crypto import generate_key

    print(generate_key())
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom demo`: the whole product in one command: embedded PostgreSQL, a local SMTP server that refuses
    a share of recipients, two demo sender accounts (one with a low daily limit), a worker running delivery and
    every producer, a stream of demo activity for each producer, and the console in front. Quitting the
    console stops everything the demo started."""
    from worker.devtools.demo import run_headless

    return run_headless(settings, rounds=args.rounds)


def build_parser(extra: Sequence[Registrar] = ()) -> argparse.ArgumentParser:
    """Every subcommand with its help: the ones here, `worker.cli.commands`' groups, then `extra`'s."""
    parser = argparse.ArgumentParser(
        prog="mailroom",
        description="PostgreSQL-native transactional email. Without MAILROOM_DATABASE_URL, every command "
        "starts (or reuses) a private embedded PostgreSQL in $MAILROOM_HOME/pg and migrates it.",
    )
    parser.add_argument("--version", action="version", version=f"mailroom {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    db = sub.add_parser(
        "db", help="migrate the schema, show or serve the database", description=cmd_db.__doc__
    )
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = db_sub.add_parser("upgrade", help="migrate to a revision (default: head)")
    up.add_argument("revision", nargs="?", default="head")
    down = db_sub.add_parser("downgrade", help="migrate down to REV ('base' removes Mailroom's tables)")
    down.add_argument("revision")
    db_sub.add_parser("current", help="print the revision the database is at")
    db_sub.add_parser("url", help="print the DSN in use")
    db_sub.add_parser("serve", help="keep the embedded PostgreSQL running until Ctrl-C (for psql)")
    db_sub.add_parser("stop", help="stop the embedded PostgreSQL even if other processes use it")
    db.set_defaults(handler=cmd_db)

    enq = sub.add_parser(
        "enqueue",
        help="enqueue email from JSON lines",
        description="Read JSON lines (keys: to, to_name, subject, text, html, template, locale, data, priority, "
        "scheduled_for, idempotency_key, campaign_id, headers, max_retries, transactional, reference_type, "
        'reference_id) and print one line per input: {"line": N, "id": ID} or {"line": N, "error": "..."}. '
        "Accepted lines stay accepted; the exit status is 1 when any line was rejected.",
    )
    enq.add_argument("path", nargs="?", default="-", help="file to read, or - for standard input (default)")
    enq.add_argument(
        "--batch-size", type=int, default=5000, help="lines per COPY batch and commit (default 5000)"
    )
    enq.add_argument("--progress", action="store_true", help="report progress on stderr after each batch")
    enq.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="processes validating a large input (default 2; 1 = this process only)",
    )
    enq.set_defaults(handler=cmd_enqueue)

    senders = sub.add_parser("senders", help="manage sender accounts", description=cmd_senders.__doc__)
    s_sub = senders.add_subparsers(dest="senders_command", required=True, metavar="ACTION")
    add = s_sub.add_parser(
        "add",
        help="add a sender account",
        description="Add an SMTP sender account. The password is never a flag value: give the name of an "
        "environment variable holding it (--password-env) or type it at a prompt (--password-prompt). It is "
        "stored encrypted with MAILROOM_SECRET_KEY.",
    )
    add.add_argument("name", help="short unique name, e.g. transactional-1")
    add.add_argument("--from", dest="from_email", required=True, help="From address")
    add.add_argument("--from-name", help="From display name")
    add.add_argument("--host", required=True, help="SMTP host")
    add.add_argument("--port", type=int, default=587, help="SMTP port (default 587)")
    add.add_argument(
        "--security",
        choices=("none", "starttls", "tls"),
        default="starttls",
        help="none, starttls (default) or tls (implicit TLS, usually port 465)",
    )
    add.add_argument("--username", help="SMTP username")
    pw = add.add_mutually_exclusive_group()
    pw.add_argument(
        "--password-env", metavar="VAR", help="read the SMTP password from environment variable VAR"
    )
    pw.add_argument("--password-prompt", action="store_true", help="prompt for the SMTP password")
    add.add_argument("--daily-limit", type=int, default=2000, help="emails per UTC day (default 2000)")
    add.add_argument(
        "--warmup-stage", type=int, default=0, choices=range(6), help="warm-up stage 1-5, 0 = none"
    )
    add.add_argument("--warmup-limit", type=int, help="daily cap while warming up")
    add.add_argument("--send-delay-ms", type=int, default=0, help="pause between emails on this account")
    add.add_argument("--max-connections", type=int, default=4, help="parallel SMTP connections (default 4)")
    add.add_argument("--dkim-domain", metavar="DOMAIN", help="DKIM signing domain (d=), e.g. example.com")
    add.add_argument("--dkim-selector", metavar="SELECTOR", help="DKIM selector (s=), e.g. mail2026")
    add.add_argument(
        "--dkim-key-file",
        metavar="PATH",
        type=pathlib.Path,
        help="RSA private key (PEM) to sign with; stored encrypted with MAILROOM_SECRET_KEY. "
        "All three --dkim-* options go together; the TXT record to publish is printed",
    )
    lst = s_sub.add_parser("list", help="list sender accounts with today's usage")
    lst.add_argument("--json", action="store_true")
    for action, text in (
        ("pause", "stop sending until resumed"),
        ("resume", "start sending again"),
        ("suspend", "take out of service (e.g. credentials revoked)"),
    ):
        p = s_sub.add_parser(action, help=text)
        p.add_argument("name")
        if action != "resume":
            p.add_argument("--reason", help="why, shown to other operators")
    senders.set_defaults(handler=cmd_senders)

    stats = sub.add_parser("stats", help="queue depth and sender usage", description=cmd_stats.__doc__)
    stats.add_argument("--json", action="store_true", help="machine-readable output")
    stats.set_defaults(handler=cmd_stats)

    rt = sub.add_parser("retry", help="send failed emails again", description=cmd_retry.__doc__)
    rt.add_argument("ids", nargs="*", type=int, metavar="ID")
    rt.add_argument("--all-failed", action="store_true", help="retry every failed email")
    rt.set_defaults(handler=cmd_retry)

    cn = sub.add_parser("cancel", help="cancel emails that are not yet sent", description=cmd_cancel.__doc__)
    cn.add_argument("ids", nargs="+", type=int, metavar="ID")
    cn.set_defaults(handler=cmd_cancel)

    sink = sub.add_parser(
        "sink", help="run the local SMTP server that catches mail", description=cmd_sink.__doc__
    )
    sink.add_argument("--host", default="127.0.0.1")
    sink.add_argument("--port", type=int, default=2525)
    sink.add_argument("--maildir", help="also store every message in this Maildir")
    sink.set_defaults(handler=cmd_sink)

    wk = sub.add_parser(
        "worker",
        help="deliver email (run one or many, on any hosts)",
        description="Claim due email with FOR UPDATE SKIP LOCKED, send it over SMTP through the sender accounts, "
        "retry with backoff, honour bounce and unsubscribe lists, record every attempt. Wakes on NOTIFY; "
        "MAILROOM_LISTEN_DATABASE_URL lets the LISTEN connection bypass a transaction-pooling PgBouncer. "
        "SIGTERM/SIGINT stop claiming, let in-flight sends finish within --grace seconds and release the rest.",
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

    kg = sub.add_parser("keygen", help="print a new MAILROOM_SECRET_KEY", description=cmd_keygen.__doc__)
    kg.set_defaults(handler=cmd_keygen)

    demo = sub.add_parser("demo", help="run the whole product locally", description=cmd_demo.__doc__)
    demo.add_argument(
        "--headless",
        action="store_true",
        help="no console (also the case without a terminal): feed --rounds of activity, deliver it, print a summary",
    )
    demo.add_argument("--rounds", type=int, default=20, help="rounds of demo activity to feed (default 20)")
    demo.set_defaults(handler=cmd_demo)

    from worker.cli.commands import registrars

    for register in (*registrars(), *extra):
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None, extra: Sequence[Registrar] = ()) -> int:
    """Run one `mailroom` command; `extra` adds subcommand groups from packages above the worker."""
    args = build_parser(extra).parse_args(argv)
    try:
        fmt = log_format()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.verbose, fmt)
    try:
        settings = Settings.from_env()
        from worker.core import db

        db.configure(settings)
        handler: Handler = args.handler
        return handler(args, settings)
    except (ConfigError, ValidationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
