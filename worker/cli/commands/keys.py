"""`mailroom keys rotate`: re-encrypt every stored secret with a new MAILROOM_SECRET_KEY."""

from __future__ import annotations

import argparse
import os
import pathlib
from typing import Any

from worker.core.config import ConfigError, Settings

NEW_KEY_VAR = "MAILROOM_NEW_SECRET_KEY"

ROTATE = f"""\
Re-encrypt every stored secret (the sender accounts' SMTP passwords, DKIM private keys and OAuth2
client secrets and refresh tokens) from the current MAILROOM_SECRET_KEY to a new key, in one
transaction, and record it in the audit trail.

The new key never goes on the command line (it would show in `ps`): it is read from the
environment variable {NEW_KEY_VAR} (or the one --new-key-env names), or from a file
only its owner can read (--new-key-file). Create one with `mailroom keygen`.

If any stored secret does not decrypt with the current key, nothing is changed and the accounts
concerned are named (exit status 2). When the current key is Mailroom's own key file
($MAILROOM_HOME/secret.key, as the demo makes), that file is given the new key.

Afterwards give every worker, console and command the new MAILROOM_SECRET_KEY and restart the
workers: one still on the old key skips these sender accounts, saying so in its log.
Exit status 0 when rotated, 2 when the new key is missing or invalid, or a secret does not decrypt.

Example:
  export {NEW_KEY_VAR}="$(mailroom keygen)"
  mailroom keys rotate
  export MAILROOM_SECRET_KEY="${NEW_KEY_VAR}"; unset {NEW_KEY_VAR}"""


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom keys rotate [--new-key-env VAR | --new-key-file PATH]`."""
    from worker.core.crypto import SecretBox, key_file, secret_box
    from worker.core.db import checked_url, connect
    from worker.ops.keys import key_id, rotate_secrets

    old = secret_box(settings)
    current = settings.secret_key or key_file(settings).read_text(encoding="ascii")
    new_key = _new_key(args).strip()
    try:
        new = SecretBox(new_key)
    except ConfigError:
        raise ConfigError("the new key is not a valid key; create one with `mailroom keygen`") from None
    if key_id(new_key) == key_id(current):
        raise ConfigError("the new key is the current MAILROOM_SECRET_KEY: there is nothing to rotate")
    with connect(checked_url(settings)) as conn:
        rotation = rotate_secrets(conn, old, new, new_key)
    print(
        f"re-encrypted {rotation.secrets} secret(s) ({rotation.passwords} SMTP password(s), "
        f"{rotation.dkim_keys} DKIM key(s), {rotation.oauth_secrets} OAuth2 secret(s)) of {rotation.accounts} sender account(s) "
        f"with the new key (key id {rotation.key_id})"
    )
    if settings.secret_key:
        print("now set MAILROOM_SECRET_KEY to the new key wherever Mailroom runs, and restart the workers")
    else:
        _replace_key_file(key_file(settings), new_key)
        print(f"{key_file(settings)} now holds the new key; restart the workers")
    return 0


def _new_key(args: argparse.Namespace) -> str:
    """The new key, from a file only its owner may read or from an environment variable."""
    if args.new_key_file is not None:
        path: pathlib.Path = args.new_key_file
        try:
            if path.stat().st_mode & 0o077:
                raise ConfigError(f"{path} is readable by others; run `chmod 600` on it")
            return path.read_text(encoding="ascii")
        except OSError as exc:
            raise ConfigError(f"cannot read the new key file: {exc}") from None
    value = os.environ.get(args.new_key_env)
    if not value:
        raise ConfigError(
            f"environment variable {args.new_key_env} is not set: export the new key there "
            "(create one with `mailroom keygen`) or give --new-key-file PATH"
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


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom keys` and its action."""
    keys = sub.add_parser(
        "keys",
        help="rotate the key that encrypts stored secrets",
        description="Manage MAILROOM_SECRET_KEY, the key that encrypts stored secrets.\n\n"
        "Examples:\n"
        "  mailroom keygen\n"
        f'  {NEW_KEY_VAR}="$(mailroom keygen)" mailroom keys rotate',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    k_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    rotate = k_sub.add_parser(
        "rotate",
        help="re-encrypt every stored secret with a new key",
        description=ROTATE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = rotate.add_mutually_exclusive_group()
    source.add_argument(
        "--new-key-env",
        metavar="VAR",
        default=NEW_KEY_VAR,
        help=f"read the new key from environment variable VAR (default {NEW_KEY_VAR})",
    )
    source.add_argument(
        "--new-key-file",
        metavar="PATH",
        type=pathlib.Path,
        help="read the new key from this file (it must be readable by its owner only)",
    )
    keys.set_defaults(handler=cmd_keys)
