"""`mailroom sink` and `demo`: the local SMTP server, the whole product locally."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from worker.cli.framework import Command, number_option, with_settings

if TYPE_CHECKING:
    from worker.core.config import Settings


SINK = """\
A local SMTP server that accepts every message and logs it (recipients masked), like MailPit:
point a sender account at it while developing. With --maildir each message is also kept as a file.
It never relays anything. Any login is accepted (AUTH PLAIN and LOGIN, without TLS, which it does
not have: on the loopback interface only), so an account with --username works against it as
against its relay. Runs until Ctrl-C; exit status 0 then, 2 when the port is in use.

Examples:
  mailroom sink --port 2525 --maildir ./mail
  mailroom senders add dev --from dev@example.com --host 127.0.0.1 --port 2525 --security none"""

DEMO = """\
The whole product in one command: an embedded PostgreSQL, a local SMTP server that refuses a share
of recipients, two demo sender accounts (one with a low daily limit), a worker running delivery and
every producer, a stream of demo activity for each producer, and the console in front. Quitting the
console stops everything the demo started; its data stays in $MAILROOM_HOME.

Without a terminal, or with --headless, it feeds --rounds of activity, waits up to a minute for the
worker to handle what is due, and prints a summary on standard output, with what is left for later
(a retry the SMTP server deferred, a birthday tomorrow); log lines go to $MAILROOM_HOME/demo.log,
never among the summary. Exit status 0, 1 when the demo's worker stopped.

Examples:
  mailroom demo
  MAILROOM_HOME=/tmp/try mailroom demo --headless --rounds 5"""


def demo_options(function: Callable[..., int]) -> Callable[..., int]:
    """`--headless` and `--rounds`, shared by the headless demo and the console's."""
    function = number_option(
        "--rounds", default=20, show_default=True, help="rounds of demo activity to feed"
    )(function)
    return click.option(
        "--headless",
        is_flag=True,
        help="no console (also the case without a terminal): feed --rounds of activity, deliver it, print a summary",
    )(function)


@click.command(cls=Command, help=DEMO)
@demo_options
@with_settings
def demo(settings: Settings, headless: bool, rounds: int) -> int:
    """`mailroom demo` without the console package: the headless demo."""
    from worker.devtools.demo import run_headless

    return run_headless(settings, rounds=rounds)


@click.command(cls=Command, help=SINK)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@number_option("--port", minimum=0, default=2525, show_default=True, help="port to listen on")
@click.option("--maildir", help="also store every message in this Maildir")
@with_settings
def sink(settings: Settings, host: str, port: int, maildir: str | None) -> int:
    """`mailroom sink`: the local SMTP server that catches what Mailroom sends."""
    import asyncio

    from worker.devtools.sink import serve_forever

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(host=host, port=port, maildir=maildir, any_login=True))
    return 0
