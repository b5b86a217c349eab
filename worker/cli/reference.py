"""Every command's help as people read it, for the generated reference pages of the documentation."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence

from worker.cli.commands import Registrar


def help_pages(extra: Sequence[Registrar] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Each command path (`()` for `mailroom` itself, `("senders", "add")`, ...) with its `--help` text."""
    from worker.cli.main import build_parser

    yield from _walk(build_parser(extra), ())


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    yield path, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))
