"""Secrets at rest: SMTP passwords and DKIM keys are encrypted with `MAILROOM_SECRET_KEY` (Fernet)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from worker.core.config import ConfigError, Settings

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

KEY_FILE = "secret.key"


class SecretBox:
    """Encrypts and decrypts small secrets with one Fernet key (AES-128-CBC + HMAC-SHA256)."""

    def __init__(self, key: str) -> None:
        # cryptography is imported here, not with the module: a worker with nothing to send starts sooner.
        from cryptography.fernet import Fernet

        self._fernet: Fernet
        try:
            self._fernet = Fernet(key.strip().encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise ConfigError(
                "MAILROOM_SECRET_KEY is not a valid key; create one with `mailroom keys generate`"
            ) from None

    def encrypt(self, plaintext: str) -> bytes:
        """Return the token to store."""
        return self._fernet.encrypt(plaintext.encode("utf-8"))

    def decrypt(self, token: bytes) -> str:
        """Return the secret, or raise `ConfigError` when the key does not match the one used to store it."""
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.decrypt(bytes(token)).decode("utf-8")
        except InvalidToken:
            raise ConfigError("stored secret cannot be decrypted with this MAILROOM_SECRET_KEY") from None


class KeylessBox(SecretBox):
    """Stands in for a box where there is no key: refuses, with the error it was given, when used."""

    def __init__(self, error: ConfigError) -> None:
        self._error = error

    def encrypt(self, plaintext: str) -> bytes:
        """Refuse: there is no key to encrypt with."""
        raise self._error

    def decrypt(self, token: bytes) -> str:
        """Refuse: there is no key to decrypt with."""
        raise self._error


class KeyOnFirstUse(SecretBox):
    """Stands in for the box until a secret is to be stored or read: only then is the key needed.

    An account that keeps nothing secret (a relay without a login) needs no key; one that does gets
    it from `secret_key` at that moment (made then on the embedded database, else the clear error),
    before anything is written."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._box: SecretBox | None = None

    def _opened(self) -> SecretBox:
        if self._box is None:
            self._box = SecretBox(secret_key(self._settings))
        return self._box

    def encrypt(self, plaintext: str) -> bytes:
        """Encrypt with the key, found or made now."""
        return self._opened().encrypt(plaintext)

    def decrypt(self, token: bytes) -> str:
        """Decrypt with the key, found or made now."""
        return self._opened().decrypt(token)


def generate_key() -> str:
    """Return a new random key."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")


def key_file(settings: Settings) -> Path:
    """Where Mailroom keeps a key it made itself: `$MAILROOM_HOME/secret.key`."""
    return settings.home / KEY_FILE


def write_key_file(path: Path, *, say: Callable[[str], None] | None = None) -> str:
    """Create a key file readable only by its owner (0600) and return the key; reuse an existing one.

    A new file is written whole under another name and linked into place, so a process reading the key
    at the same moment finds the whole key or no file, and two making it at once keep the same one.
    `say` is told once, when the file is made."""
    if path.exists():
        return read_key_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(generate_key() + "\n")
        os.link(draft, path)
    except FileExistsError:
        return read_key_file(path)  # another process made it first: theirs is the key
    finally:
        draft.unlink(missing_ok=True)
    if say is not None:
        say(
            f"mailroom: made a secret key in {path} (mode 0600); the passwords and keys stored in the "
            "database are encrypted with it and cannot be read without it: keep a copy somewhere safe, apart from the backups"
        )
    return read_key_file(path)


def read_key_file(path: Path, what: str = "key file") -> str:
    """The key a file holds; refused (`ConfigError`) when its group or others may read it, or it is unreadable.

    The one rule for every key Mailroom reads from a file: the secret key, a new key for a rotation,
    a backup key."""
    path = path.expanduser()
    try:
        if path.stat().st_mode & 0o077:
            raise ConfigError(f"{path} is readable by its group or others; run `chmod 600 {path}`")
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc}") from None


def makes_its_own_key(settings: Settings) -> bool:
    """Whether Mailroom makes its secret key itself when none is given: on the embedded database (no
    MAILROOM_DATABASE_URL), where this home is the whole installation. Against a server given by
    MAILROOM_DATABASE_URL every process sharing it needs the same key, so it must be given."""
    return not settings.database_url


NO_KEY = (
    "MAILROOM_SECRET_KEY is not set: SMTP passwords are stored encrypted with it. "
    "Create one with `mailroom keys generate` and export it to every Mailroom process that uses this "
    "database (with MAILROOM_DATABASE_URL set, none is made in $MAILROOM_HOME)."
)


def _say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def secret_key(settings: Settings, *, make: bool | None = None) -> str:
    """The secret key: `MAILROOM_SECRET_KEY`, else `$MAILROOM_HOME/secret.key`, made there at first need
    (mode 0600, said once on standard error) when `make`, by default `makes_its_own_key(settings)`.

    Raises `ConfigError` when there is none and none is to be made."""
    if settings.secret_key:
        return settings.secret_key
    path = key_file(settings)
    if path.exists():
        return read_key_file(path)
    if make is None:
        make = makes_its_own_key(settings)
    if make:
        return write_key_file(path, say=_say_on_stderr)
    raise ConfigError(NO_KEY)


def secret_box(settings: Settings, *, required: bool = True) -> SecretBox:
    """Return the box for `secret_key(settings)`, or its clear error.

    With `required=False` a key that is neither given nor in its file yet is looked for (or made) only
    when a secret is stored or read (`KeyOnFirstUse`)."""
    if required or settings.secret_key or key_file(settings).exists():
        return SecretBox(secret_key(settings))
    return KeyOnFirstUse(settings)
