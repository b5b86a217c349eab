"""What `senders add` and `senders edit` take from an operator: options, passwords, prompts and warnings."""

from __future__ import annotations

import argparse
import getpass
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from worker.core.config import ConfigError
from worker.core.plaintext import LOOPBACK_HOSTS, login_in_clear

LOCAL_HOSTS = LOOPBACK_HOSTS

# Option (its argparse dest) -> the sender account setting it changes.
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
    "max_connections": "max_connections",
    "connect_timeout": "connect_timeout_seconds",
    "command_timeout": "command_timeout_seconds",
    "data_timeout": "data_timeout_seconds",
    "allow_plaintext_login": "allow_plaintext_login",
}

ALLOW_PLAINTEXT_LOGIN = (
    "log in (password or OAuth2 token) even with --security none to a host other than localhost: the "
    "secret then crosses the network readable by anyone on the path; refused without this flag"
)


def interactive() -> bool:
    """Whether someone can answer a question: standard input is a terminal."""
    return sys.stdin.isatty()


def ask(question: str, default: str, choices: Sequence[str] | None, *, digits: bool = False) -> str:
    """Ask on standard error, read the answer from standard input (Enter takes `default`); three tries."""
    shown = f" [{default}]" if default else ""
    for _ in range(3):
        print(f"{question}{shown}: ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:  # end of input: nobody is there to answer
            break
        answer = line.strip() or default
        if (choices is None or answer in choices) and (not digits or answer.isdigit()):
            return answer
        print(f"  please answer {' or '.join(choices) if choices else 'a number'}", file=sys.stderr)
    raise ConfigError(f"no answer to {question.lower()!r}: give it as an option instead")


class _RefusePassword(argparse.Action):
    """`--password VALUE` is refused, saying how to give a password without showing it to others."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        parser.error(
            "a password on the command line shows in `ps` and the shell history: use --password-env VAR, "
            "--password-file PATH, or leave it out to be asked on a terminal"
        )


def password_from(args: argparse.Namespace) -> str | None:
    """The password from --password-env, --password-file or --password-prompt; None when none was given."""
    prompt = f"SMTP password for {args.username or args.name}: "
    return secret_from(args, "password", "password", ask=lambda: getpass.getpass(prompt))


def secret_from(
    args: argparse.Namespace, dest: str, what: str, *, ask: Callable[[], str | None], strip: bool = False
) -> str | None:
    """A secret from `--<dest>-env VAR`, the first line of `--<dest>-file PATH` (stripped with `strip`), or
    `ask` after `--<dest>-prompt`; None when no option names it."""
    variable = getattr(args, f"{dest}_env")
    if variable:
        value = os.environ.get(variable)
        if value is None:
            raise ConfigError(f"environment variable {variable} is not set")
        return value
    path: pathlib.Path | None = getattr(args, f"{dest}_file")
    if path is not None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read the {what} file: {exc.strerror}") from None
        first = (lines[0].strip() if strip else lines[0]) if lines else ""
        if not first:
            raise ConfigError(f"{path} is empty: its first line must be the {what}")
        return first
    if getattr(args, f"{dest}_prompt"):
        return ask()
    return None


def password_given(args: argparse.Namespace) -> bool:
    """Whether an option names where the password comes from."""
    return bool(args.password_env or args.password_file is not None or args.password_prompt)


def doubtful_choices(
    host: str, port: int, security: str, password: str | None, *, check_login: bool = True
) -> list[str]:
    """What an operator probably did not mean: TLS on an odd port, no TLS to a remote host, no login."""
    warnings = []
    if security == "tls" and port == 587:
        warnings.append("--security tls (implicit TLS) on port 587, which usually speaks STARTTLS")
    if security == "none" and host not in LOCAL_HOSTS:
        warnings.append(f"--security none: mail to {host} crosses the network unencrypted")
    if check_login and password is None:
        warnings.append("no password: the relay must accept mail from this host without a login")
    return warnings


def plaintext_login_warning(host: str, security: str, username: str | None, allowed: bool) -> list[str]:
    """The warning an allowed login without TLS deserves, every time it is set or kept."""
    if allowed and login_in_clear(host, security, username):
        return [f"--allow-plaintext-login: the login to {host} crosses the network unencrypted"]
    return []


def settings_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The sender account settings the options given change (`senders edit`)."""
    changes = {
        setting: getattr(args, dest) for dest, setting in SETTINGS.items() if getattr(args, dest) is not None
    }
    if args.no_login:
        changes["smtp_username"] = None
    return changes


def add_settings_arguments(parser: argparse.ArgumentParser, *, adding: bool) -> None:
    """The options `senders add` and `senders edit` share; `edit` has no defaults (only what is given changes)."""
    default = (lambda value: value) if adding else (lambda value: None)
    parser.add_argument("--from", dest="from_email", required=adding, help="From address")
    parser.add_argument("--from-name", help="From display name")
    parser.add_argument("--host", required=adding, help="SMTP host")
    parser.add_argument(
        "--port", type=int, help="SMTP port (asked on a terminal; else 587, or 465 with --security tls)"
    )
    parser.add_argument(
        "--security",
        choices=("none", "starttls", "tls"),
        help="none, starttls or tls (implicit TLS, usually port 465); asked on a terminal, else starttls",
    )
    parser.add_argument("--username", help="SMTP username (a login needs a password)")
    parser.add_argument(
        "--allow-plaintext-login",
        action="store_true" if adding else argparse.BooleanOptionalAction,
        default=False if adding else None,
        help=ALLOW_PLAINTEXT_LOGIN + ("" if adding else " (--no-allow-plaintext-login takes it back)"),
    )
    _password_arguments(parser)
    parser.add_argument(
        "--daily-limit", type=int, default=default(2000), help="emails per UTC day (default 2000)"
    )
    if not adding:
        parser.add_argument("--warmup-stage", type=int, choices=range(6), help="warm-up stage 1-5, 0 = none")
    parser.add_argument("--warmup-limit", type=int, help="daily cap while warming up")
    parser.add_argument(
        "--send-delay-ms",
        type=int,
        default=default(0),
        help="pause between emails on this account (default 0)",
    )
    parser.add_argument(
        "--max-connections", type=int, default=default(4), help="parallel SMTP connections (default 4)"
    )
    _timeout_arguments(parser)
    if not adding:
        parser.add_argument(
            "--no-login",
            action="store_true",
            help="remove the username and password (the relay needs no login)",
        )
        parser.add_argument(
            "--version",
            type=int,
            metavar="N",
            help="change it only if it is still at version N (from list --json)",
        )


def _password_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the password comes from: never the command line itself."""
    pw = parser.add_mutually_exclusive_group()
    pw.add_argument(
        "--password-env", metavar="VAR", help="read the SMTP password from environment variable VAR"
    )
    pw.add_argument(
        "--password-file",
        metavar="PATH",
        type=pathlib.Path,
        help="read the SMTP password from the first line of PATH",
    )
    pw.add_argument(
        "--password-prompt", action="store_true", help="prompt for the SMTP password (not echoed)"
    )
    pw.add_argument("--password", nargs="?", action=_RefusePassword, help=argparse.SUPPRESS)


def _timeout_arguments(parser: argparse.ArgumentParser) -> None:
    """The account's own SMTP timeouts (none given: the worker's settings apply)."""
    for flag, what, fallback in (
        (
            "--connect-timeout",
            "connecting, greeting, TLS and login",
            "MAILROOM_SMTP_CONNECT_TIMEOUT_SECONDS, 10",
        ),
        ("--command-timeout", "each of MAIL, RCPT and DATA", "MAILROOM_SMTP_COMMAND_TIMEOUT_SECONDS, 30"),
        ("--data-timeout", "sending the body and its reply", "MAILROOM_SMTP_DATA_TIMEOUT_SECONDS, 120"),
    ):
        parser.add_argument(
            flag, type=float, metavar="SECONDS", help=f"seconds allowed for {what} (default {fallback})"
        )
