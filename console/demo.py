"""`mailroom demo` with the console in front: the demo stack runs behind, quitting stops all of it."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from worker.core.config import Settings
from worker.devtools.demo import run_headless, start_demo


def _log_to_file(path: Path) -> None:
    """The console owns the terminal: every log line of this process goes to `path` instead."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)


def run_demo(settings: Settings, *, headless: bool = False, rounds: int = 20) -> int:
    """Run the demo: the console in front on a terminal, a printed summary otherwise (or with `headless`)."""
    if headless or not (sys.stdin.isatty() and sys.stdout.isatty()):
        return run_headless(settings, rounds=rounds)
    from console.app import run_console
    from console.wiring import ProducerActions

    stack = start_demo(settings)
    log_path = settings.home / "demo.log"
    click.echo(f"  demo log: {log_path}; starting the console (q quits and stops everything)")
    _log_to_file(log_path)
    try:
        stack.start_feeding(interval=1.0)
        return run_console(stack.url, settings, ProducerActions())
    finally:
        stack.stop()
