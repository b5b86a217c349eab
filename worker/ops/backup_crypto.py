"""The encrypted backup format: a pg_dump sealed in AES-256-GCM chunks, read and written as a stream.

A file is a header, then chunks:

    header  MAGIC (16 bytes) | version (1) | key source (1) | chunk size (4) | salt (16) | key id (6) | base nonce (12)
    chunk   AES-256-GCM of up to `chunk size` bytes of the dump, with its 16-byte tag

The key is derived with HKDF-SHA256 from a key in `mailroom keys generate`'s form (MAILROOM_SECRET_KEY or
a backup key file), the header's random salt and an info label of its own, so it is never the key that
encrypts the secrets in the database, and every backup has a key of its own. Chunk `i` is sealed under
the base nonce with `i` in its last eight bytes, and its associated data is the whole header, `i` and
whether it is the last chunk: a chunk moved, dropped from the end, appended or taken from another backup,
and a header edited, fail authentication. Every chunk but the last holds exactly `chunk size` bytes; the
last may hold fewer, down to none (a file always ends with a chunk marked last).

The key id is `worker.ops.keys.key_id` of the key (what `mailroom keys rotate` reports), so a backup made
with another key is named as such before any chunk is read.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import IO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from worker.ops.keys import key_id

MAGIC = b"MAILROOM-BACKUP\n"  # `head -c 16 FILE` names it
PG_DUMP_MAGIC = b"PGDMP"  # what a custom-format pg_dump starts with
VERSION = 1
CHUNK_SIZE = 1 << 20  # 1 MiB of the dump per chunk
MAX_CHUNK_SIZE = 64 << 20  # a header asking for more is refused before anything is allocated
TAG_SIZE = 16
INFO = b"mailroom backup/1 AES-256-GCM"  # HKDF's info: a backup key is never another key of Mailroom's

_HEADER = struct.Struct(">16sBBI16s6s12s")
HEADER_SIZE = _HEADER.size
_CHUNK_DATA = struct.Struct(">QB")  # chunk index, last


class KeySource(IntEnum):
    """Which key a backup was encrypted with (the header records it, so a restore can ask for the right one)."""

    SECRET_KEY = 1  # derived from MAILROOM_SECRET_KEY
    KEY_FILE = 2  # derived from a backup key file (--key-file)

    @property
    def described(self) -> str:
        """How the key is named to the operator."""
        return "MAILROOM_SECRET_KEY" if self is KeySource.SECRET_KEY else "a backup key file (--key-file)"


class SealError(ValueError):
    """The file is not an encrypted backup this version reads, or the key is not its key, or it was altered."""


@dataclass(frozen=True)
class BackupKey:
    """A key a backup is encrypted with: its 32 bytes, its public id, and where it came from."""

    material: bytes
    id: bytes
    source: KeySource

    @classmethod
    def from_text(cls, text: str, source: KeySource) -> BackupKey:
        """The key written as `mailroom keys generate` prints it (URL-safe base64 of 32 bytes)."""
        try:
            material = base64.urlsafe_b64decode(text.strip().encode("ascii"))
        except (ValueError, UnicodeEncodeError, binascii.Error):
            material = b""
        if len(material) != 32:
            raise SealError(
                f"{source.described} does not hold a valid key; create one with `mailroom keys generate`"
            )
        return cls(material, bytes.fromhex(key_id(text)), source)

    @property
    def shown(self) -> str:
        """The key id as printed."""
        return self.id.hex()


@dataclass(frozen=True)
class Header:
    """The start of an encrypted backup: format, key, chunk size, and the per-backup salt and nonce."""

    version: int
    source: KeySource
    chunk_size: int
    salt: bytes
    key_id: bytes
    nonce: bytes

    def packed(self) -> bytes:
        """The header's bytes, as written (and as every chunk's associated data begins)."""
        return _HEADER.pack(
            MAGIC, self.version, self.source, self.chunk_size, self.salt, self.key_id, self.nonce
        )


def new_header(key: BackupKey, chunk_size: int = CHUNK_SIZE) -> Header:
    """A header for a new backup: a fresh random salt (hence a fresh key) and base nonce."""
    return Header(VERSION, key.source, chunk_size, os.urandom(16), key.id, os.urandom(12))


def parse_header(data: bytes) -> Header:
    """Read a header, refusing anything this version does not read."""
    if not data.startswith(MAGIC):
        raise SealError("not an encrypted Mailroom backup")
    if len(data) < HEADER_SIZE:
        raise SealError("truncated: the backup ends inside its header")
    _, version, source, chunk_size, salt, kid, nonce = _HEADER.unpack(data[:HEADER_SIZE])
    if version != VERSION:
        raise SealError(
            f"encrypted backup format {version}; this Mailroom reads format {VERSION} (upgrade it)"
        )
    if source not in tuple(KeySource) or not 0 < chunk_size <= MAX_CHUNK_SIZE:
        raise SealError("the backup's header is damaged")
    return Header(version, KeySource(source), chunk_size, salt, kid, nonce)


def derive(key: BackupKey, header: Header) -> AESGCM:
    """The AES-256-GCM cipher of one backup: HKDF-SHA256 of the key, with the backup's salt."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=header.salt, info=INFO)
    return AESGCM(hkdf.derive(key.material))


def _nonce(header: Header, index: int) -> bytes:
    counter = int.from_bytes(header.nonce[4:], "big") ^ index
    return header.nonce[:4] + counter.to_bytes(8, "big")


def _associated(header: Header, index: int, last: bool) -> bytes:
    return header.packed() + _CHUNK_DATA.pack(index, last)


def read_full(source: IO[bytes], size: int) -> bytes:
    """Read `size` bytes, fewer only at the end of the stream (a pipe hands them over in pieces)."""
    parts, wanted = [], size
    while wanted:
        part = source.read(wanted)
        if not part:
            break
        parts.append(part)
        wanted -= len(part)
    return b"".join(parts)


def encrypt_stream(
    source: IO[bytes], target: IO[bytes], key: BackupKey, *, chunk_size: int = CHUNK_SIZE
) -> int:
    """Write `source` to `target` encrypted, one chunk in memory at a time; return the plaintext's size."""
    header = new_header(key, chunk_size)
    cipher = derive(key, header)
    target.write(header.packed())
    current, index, total = read_full(source, chunk_size), 0, 0
    while True:
        following = read_full(source, chunk_size)  # read ahead: the last chunk is sealed as the last
        last = not following
        target.write(cipher.encrypt(_nonce(header, index), current, _associated(header, index, last)))
        total += len(current)
        if last:
            return total
        current, index = following, index + 1


def check_key(header: Header, key: BackupKey) -> None:
    """Refuse a key that is not the backup's, saying which key the backup wants."""
    if key.source is not header.source:
        raise SealError(
            f"this backup was encrypted with {header.source.described}, not {key.source.described}"
            + (
                ": give it with --key-file PATH"
                if header.source is KeySource.KEY_FILE
                else ": leave out --key-file"
            )
        )
    if key.id != header.key_id:
        raise SealError(
            f"wrong key: this backup was encrypted with key id {header.key_id.hex()},"
            f" {key.source.described} has key id {key.shown}"
        )


def decrypt_stream(source: IO[bytes], target: IO[bytes], key: BackupKey) -> int:
    """Write the dump sealed in `source` to `target`, each chunk only once it authenticates; return its size.

    Raises `SealError` on the wrong key, a damaged, truncated or extended file: what was written to
    `target` by then is authentic but incomplete, so the caller discards it."""
    header = parse_header(read_full(source, HEADER_SIZE))
    check_key(header, key)
    cipher = derive(key, header)
    sealed = header.chunk_size + TAG_SIZE
    current, index, total = read_full(source, sealed), 0, 0
    if not current:
        raise SealError("truncated: the backup ends after its header")
    while True:
        following = read_full(source, sealed)
        last = not following
        plain = _open(cipher, header, index, current, last)
        target.write(plain)
        total += len(plain)
        if last:
            return total
        current, index = following, index + 1


def _open(cipher: AESGCM, header: Header, index: int, sealed: bytes, last: bool) -> bytes:
    """One chunk's plaintext, or the reason it is refused (checked again with `last` turned, to say why)."""
    try:
        return cipher.decrypt(_nonce(header, index), sealed, _associated(header, index, last))
    except InvalidTag:
        pass
    try:
        cipher.decrypt(_nonce(header, index), sealed, _associated(header, index, not last))
    except InvalidTag:
        raise SealError(
            f"damaged or tampered with: chunk {index} does not authenticate (altered, moved or from another backup)"
        ) from None
    if last:
        raise SealError(f"truncated: the backup ends after chunk {index}, which is not its last")
    raise SealError(f"tampered with: data follows chunk {index}, the backup's last")
