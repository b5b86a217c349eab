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
    """`mailroom demo`: the whole product in one command: embedded PostgreSQL, a local SMTP server that refuses
    a share of recipients, two demo sender accounts (one with a low daily limit), a worker running delivery and
    every producer, a stream of demo activity for each producer, and the console in front. Quitting the
    console stops everything the demo started."""
    from worker.devtools.demo import run_headless

    return run_headless(settings, rounds=args.rounds)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom sink`, `keygen` and `demo`."""
    sink = sub.add_parser(
        "sink",
        help="run the local SMTP server that catches mail",
        description="A local SMTP server that accepts every message and logs it (recipients masked), like "
        "MailPit: point a sender account at it while developing. Example: mailroom sink --port 2525 --maildir ./mail",
    )
    sink.add_argument("--host", default="127.0.0.1")
    sink.add_argument("--port", type=int, default=2525)
    sink.add_argument("--maildir", help="also store every message in this Maildir")
    sink.set_defaults(handler=cmd_sink)

    kg = sub.add_parser(
        "keygen",
        help="print a new MAILROOM_SECRET_KEY",
        description="Print a new random MAILROOM_SECRET_KEY (the key that encrypts SMTP passwords and DKIM keys at "
        "rest). Keep it safe: without it stored secrets cannot be read.",
    )
    kg.set_defaults(handler=cmd_keygen)

    demo = sub.add_parser("demo", help="run the whole product locally", description=cmd_demo.__doc__)
    demo.add_argument(
        "--headless",
        action="store_true",
        help="no console (also the case without a terminal): feed --rounds of activity, deliver it, print a summary",
    )
    demo.add_argument("--rounds", type=int, default=20, help="rounds of demo activity to feed (default 20)")
    demo.set_defaults(handler=cmd_demo)
