"""What `senders add` and `senders edit` take from an operator: options, passwords, prompts and warnings."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from worker.cli.framework import at_least

Decorator = Callable[[Callable[..., int]], Callable[..., int]]

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


@dataclass(frozen=True)
class SecretSource:
    """Where one secret comes from: `--<option>-env VAR`, `--<option>-file PATH` or `--<option>-prompt`."""

    option: str  # the options' stem: password, oauth-client-secret, service-account
    what: str  # what it is called in messages: password, OAuth2 client secret
    env: str | None
    file: pathlib.Path | None
    prompt: bool

    def given(self) -> bool:
        """Whether an option names where the secret comes from."""
        return bool(self.env or self.file is not None or self.prompt)

    def check(self) -> None:
        """At most one of the three: exit status 2 otherwise."""
        stem = f"--{self.option}"
        at_most_one({f"{stem}-env": self.env, f"{stem}-file": self.file, f"{stem}-prompt": self.prompt})

    def env_value(self) -> str:
        """The value of the variable `--<option>-env` names; a ConfigError when it is not set."""
        from worker.core.config import ConfigError

        value = os.environ.get(self.env or "")
        if value is None:
            raise ConfigError(f"environment variable {self.env} is not set")
        return value


@dataclass
class Given:
    """What an operator gave `senders add` or `senders edit`, one field per option (None when left out);
    `senders add` completes the relay's security and port, and a Gmail API sender's host and From."""

    name: str
    from_email: str | None = None
    from_name: str | None = None
    host: str | None = None
    port: int | None = None
    security: str | None = None
    username: str | None = None
    allow_plaintext_login: bool | None = None  # `edit`: None when neither flag is given
    password_env: str | None = None
    password_file: pathlib.Path | None = None
    password_prompt: bool = False
    daily_limit: int | None = None
    warmup_stage: int | None = None
    warmup_limit: int | None = None
    send_delay_ms: int | None = None
    batch_size: int | None = None
    streams: str | None = None
    from_domain: tuple[str, ...] = ()
    max_connections: int | None = None
    connect_timeout: float | None = None
    command_timeout: float | None = None
    data_timeout: float | None = None
    no_login: bool = False  # `edit` only, as are version and no_bounce_domain
    version: int | None = None
    # How it logs in, its bounce domain and relay provider (sender_oauth)
    auth: str | None = None
    oauth_provider: str | None = None
    oauth_token_url: str | None = None
    oauth_tenant: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret_env: str | None = None
    oauth_client_secret_file: pathlib.Path | None = None
    oauth_client_secret_prompt: bool = False
    oauth_refresh_token_env: str | None = None
    oauth_refresh_token_file: pathlib.Path | None = None
    oauth_refresh_token_prompt: bool = False
    bounce_domain: str | None = None
    no_bounce_domain: bool = False
    relay_provider: str | None = None
    # A Gmail API sender (sender_gmail) and DKIM: `add` only
    impersonate: str | None = None
    service_account_file: pathlib.Path | None = None
    service_account_env: str | None = None
    service_account_prompt: bool = False
    dkim_domain: str | None = None
    dkim_selector: str | None = None
    dkim_key_file: pathlib.Path | None = None

    @property
    def password_source(self) -> SecretSource:
        """Where the SMTP password comes from."""
        return SecretSource(
            "password", "password", self.password_env, self.password_file, self.password_prompt
        )

    def settings(self) -> dict[str, Any]:
        """The sender account settings these options give, by the account's names (None: not given)."""
        return {
            "from_email": self.from_email,
            "from_name": self.from_name,
            "smtp_host": self.host,
            "smtp_port": self.port,
            "smtp_security": self.security,
            "smtp_username": self.username,
            "daily_limit": self.daily_limit,
            "warmup_stage": self.warmup_stage,
            "warmup_limit": self.warmup_limit,
            "send_delay_ms": self.send_delay_ms,
            "batch_size": self.batch_size,
            "max_connections": self.max_connections,
            "connect_timeout_seconds": self.connect_timeout,
            "command_timeout_seconds": self.command_timeout,
            "data_timeout_seconds": self.data_timeout,
            "allow_plaintext_login": self.allow_plaintext_login,
            "streams": self.streams.replace(",", " ").split() if self.streams is not None else None,
            # --from-domain '' alone: none of its own (the domain of the account's From)
            "from_domains": [d for d in self.from_domain if d.strip()] if self.from_domain else None,
        }


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


def at_most_one(options: Mapping[str, object]) -> None:
    """Refuse options that exclude each other (`--password-env` with `--password-file`), each given by
    its flag and value (None or False: left out): exit status 2."""
    named = [flag for flag, value in options.items() if value not in (None, False)]
    if len(named) > 1:
        raise click.UsageError(f"{' and '.join(named)} exclude each other: give one of them")


def answer_in(choices: Sequence[str]) -> Callable[[str], str]:
    """A prompt's check that the answer is one of `choices`; click asks again after the reason."""

    def check(answer: str) -> str:
        if answer.strip() in choices:
            return answer.strip()
        raise click.BadParameter(f"please answer {' or '.join(choices)}")

    return check


def answer_number(answer: str) -> int:
    """A prompt's check that the answer is a whole number; click asks again after the reason."""
    if answer.strip().isdigit():
        return int(answer)
    raise click.BadParameter("please answer a number")


def ask_secret(prompt: str) -> str:
    """A secret typed on the terminal, not echoed (the prompt on standard error); Enter alone gives ''."""
    return click.prompt(prompt, default="", show_default=False, hide_input=True, err=True)


def password_from(given: Given) -> str | None:
    """The password from --password-env, --password-file or --password-prompt; None when none was given."""
    prompt = f"SMTP password for {given.username or given.name}"
    return secret_from(given.password_source, ask=lambda: ask_secret(prompt))


def secret_from(source: SecretSource, *, ask: Callable[[], str | None], strip: bool = False) -> str | None:
    """A secret from its variable, the first line of its file (stripped with `strip`), or `ask` after
    its prompt option; None when no option names it."""
    from worker.core.config import ConfigError

    source.check()
    if source.env:
        return source.env_value()
    if source.file is not None:
        try:
            lines = source.file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read the {source.what} file: {exc.strerror}") from None
        first = (lines[0].strip() if strip else lines[0]) if lines else ""
        if not first:
            raise ConfigError(f"{source.file} is empty: its first line must be the {source.what}")
        return first
    if source.prompt:
        return ask()
    return None


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
    return given.no_login or given.username == ""


def settings_changes(given: Given) -> dict[str, Any]:
    """The sender account settings the options given change (`senders edit`)."""
    changes = {setting: value for setting, value in given.settings().items() if value is not None}
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
        *_route_options(adding=adding),
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


def _route_options(*, adding: bool) -> list[Decorator]:
    """Which email the account sends: its message streams and the domains of an email's own From."""
    return [
        click.option(
            "--streams",
            metavar="NAMES",
            help="the message streams whose email it sends, comma-separated"
            + (" (default transactional,broadcast)" if adding else ""),
        ),
        click.option(
            "--from-domain",
            "from_domain",
            multiple=True,
            metavar="DOMAIN",
            help="a domain an email's own From may be in (repeat it; aligned with --dkim-domain);"
            " default: the domain of --from" + ("" if adding else "; --from-domain '' goes back to that"),
        ),
    ]


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
