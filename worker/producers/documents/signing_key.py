"""Mailroom's Ed25519 signing key: from `MAILROOM_SIGNING_KEY`, else `$MAILROOM_HOME/signing.key` (0600).

The key is 32 raw bytes written as base64 (one line), so the content of the key file is also a valid
`MAILROOM_SIGNING_KEY` value. The file is created on first use, atomically: processes racing to
create it all end up with the one key that won.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from worker.core.config import ConfigError, Settings

KEY_FILE = "signing.key"


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 key pair that signs and verifies payloads; signatures travel as base64 text."""

    private: Ed25519PrivateKey

    @property
    def public(self) -> Ed25519PublicKey:
        """The public half, which is all `verify` needs."""
        return self.private.public_key()

    @property
    def public_bytes(self) -> bytes:
        """The 32 raw bytes of the public key."""
        return self.public.public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def fingerprint(self) -> str:
        """A short, stable name for the key: the first 16 hex digits of the SHA-256 of its public bytes."""
        return hashlib.sha256(self.public_bytes).hexdigest()[:16]

    def sign(self, payload: bytes) -> str:
        """Sign `payload`; return the signature as base64."""
        return base64.b64encode(self.private.sign(payload)).decode("ascii")

    def verify(self, payload: bytes, signature: str) -> bool:
        """True when `signature` (base64) is this key's signature of `payload`."""
        try:
            raw = base64.b64decode(signature, validate=True)
        except (binascii.Error, ValueError):
            return False
        try:
            self.public.verify(raw, payload)
        except InvalidSignature:
            return False
        return True


def encode_key(private: Ed25519PrivateKey) -> str:
    """The base64 text form of a private key (its 32 raw bytes)."""
    raw = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw).decode("ascii")


def decode_key(text: str, source: str) -> SigningKey:
    """Read the base64 text form; a malformed value is a `ConfigError` naming where it came from."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ConfigError(f"{source} must be 32 bytes of base64 (an Ed25519 private key), as in {KEY_FILE}")
    return SigningKey(Ed25519PrivateKey.from_private_bytes(raw))


def generate_key() -> str:
    """A new private key in its base64 text form."""
    return encode_key(Ed25519PrivateKey.generate())


def key_path(settings: Settings) -> Path:
    """Where the generated key lives."""
    return settings.home / KEY_FILE


def _read_file(path: Path) -> SigningKey:
    from worker.core.crypto import read_key_file

    return decode_key(read_key_file(path, "signing key file"), str(path))


def _create_file(path: Path) -> None:
    """Write a new key next to `path` and link it into place; a key another process linked first wins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".signing-", dir=path.parent)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(generate_key() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


def load_signing_key(settings: Settings, *, create: bool = True) -> SigningKey:
    """The configured key, else the key file (created on first use when `create`), else a clear error."""
    if settings.signing_key:
        return decode_key(settings.signing_key, "MAILROOM_SIGNING_KEY")
    path = key_path(settings)
    if not path.exists():
        if not create:
            raise ConfigError(
                f"no signing key: set MAILROOM_SIGNING_KEY or restore {path} (it is created by the first signature)"
            )
        _create_file(path)
    return _read_file(path)
