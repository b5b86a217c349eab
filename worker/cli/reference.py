"""Every command's help as people read it, for the generated reference pages and the help tests."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import click

from worker.cli.framework import Entry


def commands(extra: Mapping[str, Entry] | None = None) -> Iterator[tuple[tuple[str, ...], click.Context]]:
    """Each command path (`()` for `mailroom` itself, `("senders", "add")`, ...) with its click context."""
    from worker.cli.main import build_cli

    root = click.Context(build_cli(extra), info_name="mailroom", max_content_width=100)
    yield from _walk(root, ())


def help_pages(extra: Mapping[str, Entry] | None = None) -> Iterator[tuple[tuple[str, ...], str]]:
    """Each command path with its `--help` text, as `mailroom PATH --help` prints it."""
    for path, ctx in commands(extra):
        yield path, ctx.command.get_help(ctx)


def _walk(ctx: click.Context, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Context]]:
    yield path, ctx
    command = ctx.command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            child = command.get_command(ctx, name)
            if child is not None and not child.hidden:
                yield from _walk(click.Context(child, info_name=name, parent=ctx), (*path, name))
