"""`mailroom keys`: make a new MAILROOM_SECRET_KEY; re-encrypt every stored secret with a new one."""

from __future__ import annotations

import os
import pathlib

import click

from worker.cli.framework import Command, Database, Group, with_database

NEW_KEY_VAR = "MAILROOM_NEW_SECRET_KEY"

KEYS = f"""\
Manage MAILROOM_SECRET_KEY, the key that encrypts stored secrets (SMTP passwords, DKIM private keys,
OAuth2 client secrets and refresh tokens, Gmail API service account keys): make a new one, or rotate
to a new one.

Examples:
  mailroom keys generate
  {NEW_KEY_VAR}="$(mailroom keys generate)" mailroom keys rotate"""

GENERATE = """\
Print a new random MAILROOM_SECRET_KEY (the key that encrypts SMTP passwords and DKIM keys at rest).
Nothing is stored or changed. Keep it safe: without it stored secrets cannot be read.
Exit status 0.

Examples:
  export MAILROOM_SECRET_KEY="$(mailroom keys generate)"
  MAILROOM_NEW_SECRET_KEY="$(mailroom keys generate)" mailroom keys rotate"""

ROTATE = f"""\
Re-encrypt every stored secret (the sender accounts' SMTP passwords, DKIM private keys, OAuth2
client secrets and refresh tokens, and Gmail API service account keys) from the current
MAILROOM_SECRET_KEY to a new key, in one transaction, and record it in the audit trail.

The new key never goes on the command line (it would show in `ps`): it is read from the
environment variable {NEW_KEY_VAR} (or the one --new-key-env names), or from a file
only its owner can read (--new-key-file). Create one with `mailroom keys generate`.

If any stored secret does not decrypt with the current key, nothing is changed and the accounts
concerned are named (exit status 2). When the current key is Mailroom's own key file
($MAILROOM_HOME/secret.key, as the demo makes), that file is given the new key.

Afterwards give every worker, console and command the new MAILROOM_SECRET_KEY and restart the
workers: one still on the old key skips these sender accounts, saying so in its log.
Exit status 0 when rotated, 2 when the new key is missing or invalid, or a secret does not decrypt.

Example:
  export {NEW_KEY_VAR}="$(mailroom keys generate)"
  mailroom keys rotate
  export MAILROOM_SECRET_KEY="${NEW_KEY_VAR}"; unset {NEW_KEY_VAR}"""


@click.group(cls=Group, help=KEYS)
def keys() -> None:
    """`mailroom keys ACTION`."""


@keys.command("generate", cls=Command, help=GENERATE, short_help="print a new MAILROOM_SECRET_KEY")
def generate() -> int:
    """`mailroom keys generate`: print a new MAILROOM_SECRET_KEY."""
    from worker.core.crypto import generate_key

    click.echo(generate_key())
    return 0


@keys.command("rotate", cls=Command, help=ROTATE, short_help="re-encrypt every stored secret with a new key")
@click.option(
    "--new-key-env",
    metavar="VAR",
    help=f"read the new key from environment variable VAR (default {NEW_KEY_VAR})",
)
@click.option(
    "--new-key-file",
    metavar="PATH",
    type=click.Path(path_type=pathlib.Path),
    help="read the new key from this file (it must be readable by its owner only)",
)
@with_database
def rotate(db: Database, new_key_env: str | None, new_key_file: pathlib.Path | None) -> int:
    """`mailroom keys rotate [--new-key-env VAR | --new-key-file PATH]`."""
    from worker.core.config import ConfigError
    from worker.core.crypto import SecretBox, key_file, secret_box
    from worker.core.db import connect
    from worker.ops.keys import key_id, rotate_secrets

    if new_key_env is not None and new_key_file is not None:
        raise click.UsageError("--new-key-env and --new-key-file exclude each other: give one of them")
    settings = db.settings
    old = secret_box(settings)
    current = settings.secret_key or key_file(settings).read_text(encoding="ascii")
    new_key = _new_key(new_key_env or NEW_KEY_VAR, new_key_file).strip()
    try:
        new = SecretBox(new_key)
    except ConfigError:
        raise ConfigError(
            "the new key is not a valid key; create one with `mailroom keys generate`"
        ) from None
    if key_id(new_key) == key_id(current):
        raise ConfigError("the new key is the current MAILROOM_SECRET_KEY: there is nothing to rotate")
    with connect(db.url) as conn:
        rotation = rotate_secrets(conn, old, new, new_key)
    click.echo(
        f"re-encrypted {rotation.secrets} secret(s) ({rotation.passwords} SMTP password(s), "
        f"{rotation.dkim_keys} DKIM key(s), {rotation.oauth_secrets} OAuth2 secret(s)"
        + (f", {rotation.gmail_keys} Gmail API key(s)" if rotation.gmail_keys else "")
        + ") "
        f"of {rotation.accounts} sender account(s)"
        + (f" and {rotation.webhook_secrets} webhook signing secret(s)" if rotation.webhook_secrets else "")
        + f" with the new key (key id {rotation.key_id})"
    )
    if settings.secret_key:
        click.echo(
            "now set MAILROOM_SECRET_KEY to the new key wherever Mailroom runs, and restart the workers"
        )
    else:
        _replace_key_file(key_file(settings), new_key)
        click.echo(f"{key_file(settings)} now holds the new key; restart the workers")
    return 0


def _new_key(variable: str, path: pathlib.Path | None) -> str:
    """The new key, from a file only its owner may read or from an environment variable."""
    from worker.core.config import ConfigError

    if path is not None:
        from worker.core.crypto import read_key_file

        return read_key_file(path, "new key file")
    value = os.environ.get(variable)
    if not value:
        raise ConfigError(
            f"environment variable {variable} is not set: export the new key there "
            "(create one with `mailroom keys generate`) or give --new-key-file PATH"
        )
    return value


def _replace_key_file(path: pathlib.Path, key: str) -> None:
    """Put the new key in Mailroom's key file at once (write beside it, then rename), readable by its owner only."""
    fresh = path.with_name(path.name + ".new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(fresh, path)
