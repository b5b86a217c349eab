"""`mailroom console`: the worker's command line plus the console, which only this package may import."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import Any

from worker.core.config import Settings


def cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom console [--read-only]`: the operators' console on the configured database."""
    from console.app import run_console
    from console.wiring import ProducerActions
    from worker.core.db import database_url

    return run_console(database_url(settings), settings, ProducerActions(), read_only=args.read_only)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `console` to the `mailroom` subcommands."""
    parser = sub.add_parser(
        "console",
        help="the operators' console (Textual), live through LISTEN/NOTIFY",
        description="Watch the queue, senders, accounts, signatures and schedule, and retry, cancel, pause or "
        "suspend from the keyboard. Keys: 1-7 switch screens, 0 shows the audit trail, ? lists every key, / filters, ctrl+p opens the "
        "command palette, q quits. --read-only hides every action that changes the database.",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="show everything, change nothing (actions are hidden)"
    )
    parser.set_defaults(handler=cmd_console)
    # The demo, defined by the worker without a console, gets the console in front.
    demo = sub.choices.get("demo")
    if demo is not None:
        demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom demo`: the whole product, with the console in front when there is a terminal."""
    from console.demo import run_demo

    return run_demo(settings, headless=args.headless, rounds=args.rounds)


def help_pages() -> Iterator[tuple[tuple[str, ...], str]]:
    """Every `mailroom` command's path and `--help` text, console commands included (for the docs site)."""
    from worker.cli.reference import help_pages as worker_help_pages

    return worker_help_pages((register,))


def main(argv: Sequence[str] | None = None) -> int:
    """The `mailroom` console script: every worker command, and `console`."""
    from worker.cli.main import main as worker_main

    return worker_main(argv, extra=(register,))


if __name__ == "__main__":
    import sys

    sys.exit(main())
