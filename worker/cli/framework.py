"""The `mailroom` command's framework on click: lazily loaded commands, help printed as written, one
decorator for each thing a command needs (settings, the database at this Mailroom's schema).

Nothing here imports more than click at module level: `mailroom --help` loads no command module,
no setting and no database driver (`bench/startup.py` measures it).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Concatenate, ParamSpec

import click

if TYPE_CHECKING:
    from worker.core.config import Settings

P = ParamSpec("P")
log = logging.getLogger("mailroom")


@dataclass(frozen=True)
class Entry:
    """One top-level command, loaded only when it runs: where it lives, its line in `mailroom --help`."""

    target: str  # "module:attribute" of a click command or group
    summary: str
    section: str
    alias_of: tuple[str, ...] = ()  # an earlier spelling: the command path it now runs


class HelpAsWritten:
    """Print a command's help text exactly as written (line breaks, indented examples), like man pages."""

    help: str | None

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.help:
            formatter.write_paragraph()
            formatter.write(self.help.rstrip() + "\n")


class Command(HelpAsWritten, click.Command):
    """A `mailroom` command that runs something."""


class Group(HelpAsWritten, click.Group):
    """A command with actions (`mailroom senders add`); its own help as written, actions in the order given."""

    command_class = Command

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


# Each group's subgroups are the same kind of group.
Group.group_class = Group


class LazyGroup(Group):
    """The top of `mailroom`: commands imported when they run, listed by section from their entries."""

    def __init__(self, *args: Any, entries: Mapping[str, Entry], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries = dict(entries)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, entry in self.entries.items() if not entry.alias_of]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.entries.get(cmd_name)
        if entry is None:
            return None
        if entry.alias_of:
            return self._alias(ctx, cmd_name, entry.alias_of)
        module_name, _, attribute = entry.target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{entry.target} is not a click command")
        command.short_help = entry.summary
        return command

    def _alias(self, ctx: click.Context, old: str, path: tuple[str, ...]) -> click.Command | None:
        command = self.get_command(ctx, path[0])
        for name in path[1:]:
            command = command.get_command(ctx, name) if isinstance(command, click.Group) else None
        if command is None:
            return None
        new = " ".join(path)
        click.echo(
            f"note: `mailroom {old}` is now `mailroom {new}`; the old name goes in a later release", err=True
        )
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for name in self.list_commands(ctx):
            entry = self.entries[name]
            sections.setdefault(entry.section, []).append((name, entry.summary))
        for section, rows in sections.items():
            with formatter.section(section):
                formatter.write_dl(rows)


# --- what a command needs -------------------------------------------------------------------------


@dataclass
class Runtime:
    """What the top-level options decided, and the settings once a command asks for them."""

    verbose: bool = False
    _settings: Settings | None = None

    def settings(self) -> Settings:
        """Read `MAILROOM_*` once, configure logging and database access; `ConfigError` when malformed."""
        if self._settings is None:
            from worker.core import db
            from worker.core.config import ConfigError, Settings
            from worker.core.logs import configure_logging, log_format

            try:
                configure_logging(self.verbose, log_format())
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            self._settings = Settings.from_env()
            db.configure(self._settings)
        return self._settings


@dataclass(frozen=True)
class Database:
    """The database a command works on, at this Mailroom's schema, with the settings that found it."""

    url: str
    settings: Settings


def runtime() -> Runtime:
    """The running command's `Runtime` (one per `mailroom` invocation)."""
    return click.get_current_context().ensure_object(Runtime)


def with_settings(function: Callable[Concatenate[Settings, P], int]) -> Callable[P, int]:
    """Call the command with the settings read from the environment as its first argument."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        return function(runtime().settings(), *args, **kwargs)

    return run


def with_database(function: Callable[Concatenate[Database, P], int]) -> Callable[P, int]:
    """Call the command with the database at this Mailroom's schema as its first argument.

    An external database (`MAILROOM_DATABASE_URL`) whose schema is missing, older or newer ends
    the command before it does anything: exit status 4 with one line that says what to run. The
    embedded server is migrated on the spot."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        from worker.core.db import checked_url

        settings = runtime().settings()
        return function(Database(checked_url(settings), settings), *args, **kwargs)

    return run


def json_option(function: Callable[..., int]) -> Callable[..., int]:
    """`--json`: machine-readable output, passed as `as_json`."""
    return click.option("--json", "as_json", is_flag=True, help="machine-readable output")(function)


def yes_option(what: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """`--yes`: confirm a change that cannot be undone, passed as `yes`."""
    return click.option("--yes", is_flag=True, help=f"confirm: {what}")


def number_option(
    *names: str, help: str, minimum: int = 1, **more: Any
) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """An option taking a whole number of `minimum` or more (`at_least`), shown as N unless `more` names a
    metavar; `more` passes the rest (default, show_default, ...) to `click.option`."""
    return click.option(*names, type=at_least(minimum), help=help, **{"metavar": "N", **more})


def max_connections_option(variable: str, default: int) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """`--max-connections-per-client N` of a public server, passed as `max_connections_per_client`
    (None: the setting `variable`, else `default`)."""
    return number_option(
        "--max-connections-per-client",
        minimum=0,
        help=f"connections one client network may hold, 0 for no cap (default {variable}, else {default})",
    )


# --- asking the operator --------------------------------------------------------------------------


def interactive() -> bool:
    """Whether someone can answer a question: standard input is a terminal."""
    return sys.stdin.isatty()


def confirmed_by_typing(question: str, word: str, *, refusal: str) -> bool:
    """Whether the operator, asked `question` on standard error, typed `word` (else 'nothing changed' is
    said). Without a terminal nobody can answer: `refusal` (which names --yes) with exit status 2."""
    from worker.core.config import ConfigError

    if not interactive():
        raise ConfigError(refusal)
    answer: str = click.prompt(question, default="", show_default=False, err=True)
    if answer.strip() == word:
        return True
    click.echo("nothing changed", err=True)
    return False


# --- values on the command line -------------------------------------------------------------------


def at_least(minimum: int) -> click.IntRange:
    """click's whole number of `minimum` or more (0 often meaning "no cap"); its range is shown in help."""
    kind = click.IntRange(min=minimum)
    kind.name = "integer"  # not "integer range": 'x' is not a valid integer, 0 is not in the range x>=1
    return kind


class HostPort(click.ParamType[tuple[str, int | None]]):
    """HOST:PORT (or HOST alone when the port is optional); an IPv6 host may be bracketed."""

    def __init__(self, *, port_required: bool, lowest_port: int, example: str) -> None:
        self.port_required = port_required
        self.lowest_port = lowest_port  # 0 lets the system choose a port to listen on
        self.example = example
        self.name = "HOST:PORT" if port_required else "HOST[:PORT]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int | None]:
        if isinstance(value, tuple):
            return value
        text = str(value)
        host, colon, port = text.rpartition(":")
        if not self.port_required and (not colon or "]" in port):  # no port, or a bare [IPv6] address
            return text.strip("[]"), None
        if (
            not colon
            or not host.strip("[]")
            or not port.isdigit()
            or not self.lowest_port <= int(port) <= 65535
        ):
            self.fail(
                f"expected {self.name.replace('[:PORT]', ' or HOST:PORT')}, e.g. {self.example}, not {text!r}",
                param,
                ctx,
            )
        return host.strip("[]"), int(port)


@contextlib.contextmanager
def private_output(path: str | None) -> Iterator[IO[str]]:
    """Standard output (`path` None or "-"), or `path` created or truncated with mode 0600, for writing."""
    from worker.core.config import ConfigError

    if path is None or path == "-":
        yield sys.stdout
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        yield out
