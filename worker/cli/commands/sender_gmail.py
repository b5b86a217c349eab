"""What `senders add --auth gmail` takes: the Workspace user to send as and the service account key.

The key file is a secret like a password: it comes from a file (--service-account-file, the whole
JSON file Google's console made), an environment variable holding that JSON (--service-account-env),
or a prompt on a terminal (--service-account-prompt: the JSON pasted on one line); never from the
command line itself.
"""

from __future__ import annotations

import pathlib

import click

from worker.cli.commands.sender_input import Decorator, Given, SecretSource, apply, ask_secret, refused

# Where a Gmail API sender's email goes, as `senders list` shows it: the worker sends to
# MAILROOM_GMAIL_API_URL, which is this host unless a private deployment or a test says otherwise.
GMAIL_API_HOST = "gmail.googleapis.com"
GMAIL_API_PORT = 443


def gmail_options() -> Decorator:
    """The Gmail API options of `senders add`."""
    options: list[Decorator] = [
        click.option(
            "--impersonate",
            metavar="ADDRESS",
            help="--auth gmail: the Google Workspace user the service account sends as (domain-wide "
            "delegation); the From address when --from is left out",
        ),
        click.option(
            "--service-account-file",
            metavar="PATH",
            type=click.Path(path_type=pathlib.Path),
            help="--auth gmail: the service account's JSON key file; stored encrypted",
        ),
        click.option(
            "--service-account-env",
            metavar="VAR",
            help="--auth gmail: read the service account's JSON key from environment variable VAR",
        ),
        click.option(
            "--service-account-prompt",
            is_flag=True,
            help="--auth gmail: prompt for the service account's JSON key (pasted on one line, not echoed)",
        ),
        click.option(
            "--service-account",
            hidden=True,
            is_flag=False,
            flag_value="",
            expose_value=False,
            callback=refused(
                "a key on the command line shows in `ps` and the shell history: use "
                "--service-account-file PATH, --service-account-env VAR or --service-account-prompt"
            ),
        ),
    ]
    return lambda function: apply(function, options)


def key_source(given: Given) -> SecretSource:
    """Where the service account key comes from."""
    return SecretSource(
        "service-account",
        "service account key",
        given.service_account_env,
        given.service_account_file,
        given.service_account_prompt,
    )


def gmail_given(given: Given) -> bool:
    """Whether a Gmail API option was given."""
    return bool(given.impersonate) or key_source(given).given()


def complete_gmail_add(given: Given, asking: bool) -> str:
    """`senders add --auth gmail`: the user to send as (also the From address unless given), where the
    API is shown to be, and the service account key's JSON text (asked on a terminal when missing)."""
    from worker.core.validation import ValidationError

    if not given.impersonate:
        raise ValidationError(
            "impersonate", "--auth gmail needs --impersonate USER@DOMAIN (the Workspace user it sends as)"
        )
    for option, value in (
        ("--username", given.username),
        ("--host", given.host),
        ("--port", given.port),
        ("--security", given.security),
    ):
        if value is not None:
            raise ValidationError("auth", f"a Gmail API sender sends through the API: leave out {option}")
    if given.from_email is None:
        given.from_email = given.impersonate
    given.host, given.port, given.security = GMAIL_API_HOST, GMAIL_API_PORT, "tls"
    key = gmail_key_from(given, ask=asking)
    if key is None:
        raise ValidationError(
            "service_account",
            "a Gmail API sender needs its service account key: give --service-account-file PATH "
            "(or --service-account-env VAR, or run on a terminal to be asked)",
        )
    return key


def gmail_key_from(given: Given, *, ask: bool) -> str | None:
    """The key's JSON text from the file, the variable or the prompt named; with `ask`, prompted when none is."""
    from worker.core.config import ConfigError
    from worker.core.gmail_key import MAX_KEY_BYTES

    source = key_source(given)
    source.check()
    if source.env:
        return source.env_value()
    if source.file is not None:
        try:
            with source.file.open("rb") as file:
                data = file.read(MAX_KEY_BYTES + 1)  # a key file is small: never read a big one whole
        except OSError as exc:
            raise ConfigError(f"cannot read the service account key file: {exc.strerror}") from None
        return data.decode("utf-8", "replace")
    if source.prompt or ask:
        click.echo("Paste the service account's JSON key on one line.", err=True)
        return ask_secret(f"Service account key for {given.impersonate}") or None
    return None
