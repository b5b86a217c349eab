"""`mailroom console` and the demo with the console in front: the worker's command line plus the
commands only this package may define (the worker knows nothing of screens)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import click

from worker.cli.commands.dev import DEMO, demo_options
from worker.cli.framework import Command, Entry, with_settings

if TYPE_CHECKING:
    from worker.core.config import Settings

CONSOLE = """\
Watch the queue, senders, accounts, signatures and schedule, and retry, cancel, pause or suspend
from the keyboard. Keys: 1-7 switch screens, 0 shows the audit trail, ? lists every key, / filters,
ctrl+p opens the command palette, q quits. --read-only hides every action that changes the database.
Exit status 0 when you quit; 4 when the database schema is missing or of another version.

Examples:
  mailroom console
  mailroom console --read-only"""

# The console's commands; `demo` replaces the worker's headless one.
ENTRIES = {
    "console": Entry(
        "console.cli:console",
        "the operators' console (Textual), live through LISTEN/NOTIFY",
        "Send and deliver",
    ),
    "demo": Entry("console.cli:demo", "run the whole product locally", "Send and deliver"),
}


@click.command(cls=Command, help=CONSOLE)
@click.option("--read-only", is_flag=True, help="show everything, change nothing (actions are hidden)")
@with_settings
def console(settings: Settings, read_only: bool) -> int:
    """`mailroom console [--read-only]`: the operators' console on the configured database."""
    from console.app import run_console
    from console.wiring import ProducerActions
    from worker.core.db import checked_url

    return run_console(checked_url(settings), settings, ProducerActions(), read_only=read_only)


@click.command(cls=Command, help=DEMO)
@demo_options
@with_settings
def demo(settings: Settings, headless: bool, rounds: int) -> int:
    """`mailroom demo`: the whole product, with the console in front when there is a terminal."""
    from console.demo import run_demo

    return run_demo(settings, headless=headless, rounds=rounds)


def help_pages() -> Iterator[tuple[tuple[str, ...], str]]:
    """Every `mailroom` command's path and `--help` text, console commands included (for the docs site)."""
    from worker.cli.reference import help_pages as worker_help_pages

    return worker_help_pages(ENTRIES)


def main(argv: Sequence[str] | None = None) -> int:
    """The `mailroom` console script: every worker command, and `console`."""
    from worker.cli.main import main as worker_main

    return worker_main(argv, extra=ENTRIES)


def script() -> None:
    """The `mailroom` console script: run one command and exit with its status.

    Everything still alive is frozen out of the garbage collector first: the interpreter's last
    collection at exit would otherwise walk every object the command loaded (a tenth of a second
    after importing psycopg, measured by `bench/startup.py`) only to free memory the exit frees anyway.
    Files and streams are closed by the commands themselves; standard output is flushed at exit."""
    import gc
    import sys

    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    script()
