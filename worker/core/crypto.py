"""Secrets at rest: SMTP passwords and DKIM keys are encrypted with `MAILROOM_SECRET_KEY` (Fernet)."""

from __future__ import annotations

import os
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
    """Stands in for the box where no key is configured: fine until a secret is to be stored or read.

    An account that keeps nothing secret (a relay without a login) needs no key; one that does fails
    with the same clear error `secret_box` gives, before anything is written."""

    def __init__(self, error: ConfigError) -> None:
        self._error = error

    def encrypt(self, plaintext: str) -> bytes:
        """Refuse: there is no key to encrypt with."""
        raise self._error

    def decrypt(self, token: bytes) -> str:
        """Refuse: there is no key to decrypt with."""
        raise self._error


def generate_key() -> str:
    """Return a new random key."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")


def key_file(settings: Settings) -> Path:
    """Where the demo keeps its generated key."""
    return settings.home / KEY_FILE


def write_key_file(path: Path) -> str:
    """Create a key file readable only by its owner (0600) and return the key; reuse an existing one."""
    if path.exists():
        return path.read_text(encoding="ascii").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = generate_key()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key + "\n")
    return key


def secret_box(settings: Settings, *, required: bool = True) -> SecretBox:
    """Return the box for `MAILROOM_SECRET_KEY`, else the key file in `$MAILROOM_HOME`, else a clear error.

    With `required=False` a missing key gives a `KeylessBox`, which fails only when used."""
    if settings.secret_key:
        return SecretBox(settings.secret_key)
    path = key_file(settings)
    if path.exists():
        if path.stat().st_mode & 0o077:
            raise ConfigError(f"{path} is readable by others; run `chmod 600` on it")
        return SecretBox(path.read_text(encoding="ascii"))
    error = ConfigError(
        "MAILROOM_SECRET_KEY is not set: SMTP passwords are stored encrypted with it. "
        "Create one with `mailroom keys generate` and export it."
    )
    if required:
        raise error
    return KeylessBox(error)
