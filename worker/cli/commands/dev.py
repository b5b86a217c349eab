"""`mailroom sink`, `keygen` and `demo`: the local SMTP server, a new secret key, the whole product locally."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from worker.core.config import Settings


def cmd_sink(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom sink`: the local SMTP server that catches what Mailroom sends."""
    import asyncio

    from worker.devtools.sink import serve_forever

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(host=args.host, port=args.port, maildir=args.maildir))
    return 0


def cmd_keygen(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom keygen`: print a new MAILROOM_SECRET_KEY."""
    from worker.core.crypto import generate_key

    print(generate_key())
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom demo` without the console package: the headless demo."""
    from worker.devtools.demo import run_headless

    return run_headless(settings, rounds=args.rounds)


SINK = """\
A local SMTP server that accepts every message and logs it (recipients masked), like MailPit:
point a sender account at it while developing. With --maildir each message is also kept as a file.
It never relays anything. Runs until Ctrl-C; exit status 0 then, 2 when the port is in use.

Examples:
  mailroom sink --port 2525 --maildir ./mail
  mailroom senders add dev --from dev@example.com --host 127.0.0.1 --port 2525 --security none"""

KEYGEN = """\
Print a new random MAILROOM_SECRET_KEY (the key that encrypts SMTP passwords and DKIM keys at rest).
Nothing is stored or changed. Keep it safe: without it stored secrets cannot be read.
Exit status 0.

Examples:
  export MAILROOM_SECRET_KEY="$(mailroom keygen)"
  MAILROOM_NEW_SECRET_KEY="$(mailroom keygen)" mailroom keys rotate"""

DEMO = """\
The whole product in one command: an embedded PostgreSQL, a local SMTP server that refuses a share
of recipients, two demo sender accounts (one with a low daily limit), a worker running delivery and
every producer, a stream of demo activity for each producer, and the console in front. Quitting the
console stops everything the demo started; its data stays in $MAILROOM_HOME.

Without a terminal, or with --headless, it feeds --rounds of activity, waits for the worker, and
prints a summary on standard output; log lines go to $MAILROOM_HOME/demo.log, never among the
summary. Exit status 0, 1 when the demo's worker stopped.

Examples:
  mailroom demo
  MAILROOM_HOME=/tmp/try mailroom demo --headless --rounds 5"""


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom sink`, `keygen` and `demo`."""
    raw = argparse.RawDescriptionHelpFormatter
    sink = sub.add_parser(
        "sink", help="run the local SMTP server that catches mail", description=SINK, formatter_class=raw
    )
    sink.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sink.add_argument("--port", type=int, default=2525, help="port to listen on (default 2525)")
    sink.add_argument("--maildir", help="also store every message in this Maildir")
    sink.set_defaults(handler=cmd_sink)

    kg = sub.add_parser(
        "keygen", help="print a new MAILROOM_SECRET_KEY", description=KEYGEN, formatter_class=raw
    )
    kg.set_defaults(handler=cmd_keygen)

    demo = sub.add_parser("demo", help="run the whole product locally", description=DEMO, formatter_class=raw)
    demo.add_argument(
        "--headless",
        action="store_true",
        help="no console (also the case without a terminal): feed --rounds of activity, deliver it, print a summary",
    )
    demo.add_argument("--rounds", type=int, default=20, help="rounds of demo activity to feed (default 20)")
    demo.set_defaults(handler=cmd_demo)
