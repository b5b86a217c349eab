"""What `senders add` and `senders edit` take from an operator: options, passwords, prompts and warnings."""

from __future__ import annotations

import getpass
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import click

from worker.cli.framework import at_least

Decorator = Callable[[Callable[..., int]], Callable[..., int]]

# Option (its parameter name) -> the sender account setting it changes.
SETTINGS = {
    "from_email": "from_email",
    "from_name": "from_name",
    "host": "smtp_host",
    "port": "smtp_port",
    "security": "smtp_security",
    "username": "smtp_username",
    "daily_limit": "daily_limit",
    "warmup_stage": "warmup_stage",
    "warmup_limit": "warmup_limit",
    "send_delay_ms": "send_delay_ms",
    "batch_size": "batch_size",
    "max_connections": "max_connections",
    "connect_timeout": "connect_timeout_seconds",
    "command_timeout": "command_timeout_seconds",
    "data_timeout": "data_timeout_seconds",
    "allow_plaintext_login": "allow_plaintext_login",
}

SECURITY = ("none", "starttls", "tls")
WARMUP_STAGE = click.IntRange(0, 5)

ALLOW_PLAINTEXT_LOGIN = (
    "log in (password or OAuth2 token) even with --security none to a host other than localhost: the "
    "secret then crosses the network readable by anyone on the path; refused without this flag"
)
SHOWN_IN_PS = (
    "a password on the command line shows in `ps` and the shell history: use --password-env VAR, "
    "--password-file PATH, or leave it out to be asked on a terminal"
)


class Given(SimpleNamespace):
    """What an operator gave `senders add` or `senders edit`: one attribute per option, None when left out."""


def apply(function: Callable[..., int], options: Sequence[Decorator]) -> Callable[..., int]:
    """Decorate `function` with `options`, listed in its help in the order given."""
    for option in reversed(options):
        function = option(function)
    return function


def refused(message: str) -> Callable[[click.Context, click.Parameter, str | None], None]:
    """The callback of a hidden option whose value must never be typed: a usage error saying why."""

    def refuse(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is not None:
            raise click.UsageError(message, ctx)

    return refuse


def at_most_one(given: Given, *names: str) -> None:
    """Refuse options that exclude each other (`--password-env` with `--password-file`): exit status 2."""
    named = [
        f"--{name.replace('_', '-')}" for name in names if getattr(given, name, None) not in (None, False)
    ]
    if len(named) > 1:
        raise click.UsageError(f"{' and '.join(named)} exclude each other: give one of them")


def interactive() -> bool:
    """Whether someone can answer a question: standard input is a terminal."""
    return sys.stdin.isatty()


def ask(question: str, default: str, choices: Sequence[str] | None, *, digits: bool = False) -> str:
    """Ask on standard error, read the answer from standard input (Enter takes `default`); three tries."""
    from worker.core.config import ConfigError

    shown = f" [{default}]" if default else ""
    for _ in range(3):
        click.echo(f"{question}{shown}: ", nl=False, err=True)
        line = sys.stdin.readline()
        if not line:  # end of input: nobody is there to answer
            break
        answer = line.strip() or default
        if (choices is None or answer in choices) and (not digits or answer.isdigit()):
            return answer
        click.echo(f"  please answer {' or '.join(choices) if choices else 'a number'}", err=True)
    raise ConfigError(f"no answer to {question.lower()!r}: give it as an option instead")


def password_from(given: Given) -> str | None:
    """The password from --password-env, --password-file or --password-prompt; None when none was given."""
    prompt = f"SMTP password for {given.username or given.name}: "
    return secret_from(given, "password", "password", ask=lambda: getpass.getpass(prompt))


def secret_from(
    given: Given, dest: str, what: str, *, ask: Callable[[], str | None], strip: bool = False
) -> str | None:
    """A secret from `--<dest>-env VAR`, the first line of `--<dest>-file PATH` (stripped with `strip`), or
    `ask` after `--<dest>-prompt`; None when no option names it."""
    from worker.core.config import ConfigError

    at_most_one(given, f"{dest}_env", f"{dest}_file", f"{dest}_prompt")
    variable = getattr(given, f"{dest}_env")
    if variable:
        value = os.environ.get(variable)
        if value is None:
            raise ConfigError(f"environment variable {variable} is not set")
        return value
    path: pathlib.Path | None = getattr(given, f"{dest}_file")
    if path is not None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read the {what} file: {exc.strerror}") from None
        first = (lines[0].strip() if strip else lines[0]) if lines else ""
        if not first:
            raise ConfigError(f"{path} is empty: its first line must be the {what}")
        return first
    if getattr(given, f"{dest}_prompt"):
        return ask()
    return None


def password_given(given: Given) -> bool:
    """Whether an option names where the password comes from."""
    return bool(given.password_env or given.password_file is not None or given.password_prompt)


def doubtful_choices(
    host: str, port: int, security: str, password: str | None, *, check_login: bool = True
) -> list[str]:
    """What an operator probably did not mean: TLS on an odd port, no TLS to a remote host, no login."""
    from worker.core.plaintext import LOOPBACK_HOSTS

    warnings = []
    if security == "tls" and port == 587:
        warnings.append("--security tls (implicit TLS) on port 587, which usually speaks STARTTLS")
    if security == "none" and host not in LOOPBACK_HOSTS:
        warnings.append(f"--security none: mail to {host} crosses the network unencrypted")
    if check_login and password is None:
        warnings.append("no password: the relay must accept mail from this host without a login")
    return warnings


def plaintext_login_warning(host: str, security: str, username: str | None, allowed: bool) -> list[str]:
    """The warning an allowed login without TLS deserves, every time it is set or kept."""
    from worker.core.plaintext import login_in_clear

    if allowed and login_in_clear(host, security, username):
        return [f"--allow-plaintext-login: the login to {host} crosses the network unencrypted"]
    return []


def clears_login(given: Given) -> bool:
    """Whether `senders edit` removes the account's login (username and password): --no-login, or an
    empty --username (an account with an empty username would keep its password and still look like
    one with a login)."""
    return bool(getattr(given, "no_login", False)) or given.username == ""


def settings_changes(given: Given) -> dict[str, Any]:
    """The sender account settings the options given change (`senders edit`)."""
    changes = {
        setting: getattr(given, dest)
        for dest, setting in SETTINGS.items()
        if getattr(given, dest) is not None
    }
    if clears_login(given):
        changes["smtp_username"] = None
    if changes.get("batch_size") == 0:
        changes["batch_size"] = None  # back to the worker's --batch-size
    return changes


def settings_options(*, adding: bool) -> Decorator:
    """The options `senders add` and `senders edit` share; `edit` has no defaults (only what is given changes)."""

    def default(value: object) -> object:
        return value if adding else None

    plaintext = "--allow-plaintext-login" if adding else "--allow-plaintext-login/--no-allow-plaintext-login"
    options: list[Decorator] = [
        # Required when adding, but by `senders add` itself: a Gmail API sender has neither (see sender_gmail).
        click.option(
            "--from",
            "from_email",
            help="From address" + (" (required; --auth gmail: --impersonate by default)" if adding else ""),
        ),
        click.option("--from-name", help="From display name"),
        click.option(
            "--host", help="SMTP host" + (" (required, but not with --auth gmail)" if adding else "")
        ),
        click.option(
            "--port", type=int, help="SMTP port (asked on a terminal; else 587, or 465 with --security tls)"
        ),
        click.option(
            "--security",
            type=click.Choice(SECURITY),
            help="none, starttls or tls (implicit TLS, usually port 465); asked on a terminal, else starttls",
        ),
        click.option("--username", help="SMTP username (a login needs a password)"),
        click.option(
            plaintext,
            "allow_plaintext_login",
            is_flag=True,
            default=default(False),
            help=ALLOW_PLAINTEXT_LOGIN + ("" if adding else " (--no-allow-plaintext-login takes it back)"),
        ),
        *_password_options(),
        click.option(
            "--daily-limit", type=int, default=default(2000), help="emails per UTC day (default 2000)"
        ),
    ]
    if not adding:
        options.append(click.option("--warmup-stage", type=WARMUP_STAGE, help="warm-up stage 1-5, 0 = none"))
    options += [*_pacing_options(adding=adding), *_timeout_options()]
    if not adding:
        options += [
            click.option(
                "--no-login",
                is_flag=True,
                help="remove the username and password (the relay needs no login); --username '' does too",
            ),
            click.option(
                "--version",
                type=int,
                metavar="N",
                help="change it only if it is still at version N (from list --json)",
            ),
        ]
    return lambda function: apply(function, options)


def _pacing_options(*, adding: bool) -> list[Decorator]:
    """Warm-up cap, pacing, batch size and connections; `edit` has no defaults."""

    def default(value: object) -> object:
        return value if adding else None

    return [
        click.option("--warmup-limit", type=int, help="daily cap while warming up"),
        click.option(
            "--send-delay-ms",
            type=int,
            default=default(0),
            help="pause between emails on this account (default 0)",
        ),
        click.option(
            "--batch-size",
            type=at_least(1) if adding else at_least(0),
            metavar="N",
            help="emails claimed for it at a time, sent before the worker looks at its bounces and errors "
            "again (default and ceiling: the worker's --batch-size" + (")" if adding else "; 0: back to it)"),
        ),
        click.option(
            "--max-connections", type=int, default=default(4), help="parallel SMTP connections (default 4)"
        ),
    ]


def _password_options() -> list[Decorator]:
    """Where the password comes from: never the command line itself."""
    return [
        click.option(
            "--password-env", metavar="VAR", help="read the SMTP password from environment variable VAR"
        ),
        click.option(
            "--password-file",
            metavar="PATH",
            type=click.Path(path_type=pathlib.Path),
            help="read the SMTP password from the first line of PATH",
        ),
        click.option("--password-prompt", is_flag=True, help="prompt for the SMTP password (not echoed)"),
        click.option(
            "--password",
            hidden=True,
            is_flag=False,
            flag_value="",
            expose_value=False,
            callback=refused(SHOWN_IN_PS),
        ),
    ]


def _timeout_options() -> list[Decorator]:
    """The account's own SMTP timeouts (none given: the worker's settings apply)."""
    return [
        click.option(
            flag, type=float, metavar="SECONDS", help=f"seconds allowed for {what} (default {fallback})"
        )
        for flag, what, fallback in (
            (
                "--connect-timeout",
                "connecting, greeting, TLS and login",
                "MAILROOM_SMTP_CONNECT_TIMEOUT_SECONDS, 10",
            ),
            ("--command-timeout", "each of MAIL, RCPT and DATA", "MAILROOM_SMTP_COMMAND_TIMEOUT_SECONDS, 30"),
            ("--data-timeout", "sending the body and its reply", "MAILROOM_SMTP_DATA_TIMEOUT_SECONDS, 120"),
        )
    ]
