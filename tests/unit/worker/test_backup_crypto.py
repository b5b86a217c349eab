"""The encrypted backup format: a stream of AES-256-GCM chunks that opens whole with its key or not at all."""

from __future__ import annotations

import io
import os

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from worker.core.crypto import generate_key
from worker.ops.backup_crypto import (
    HEADER_SIZE,
    MAGIC,
    TAG_SIZE,
    BackupKey,
    KeySource,
    SealError,
    decrypt_stream,
    encrypt_stream,
)
from worker.ops.keys import key_id

CHUNK = 64  # small chunks, so a few bytes make several of them
SEALED = CHUNK + TAG_SIZE


def _key(source: KeySource = KeySource.SECRET_KEY) -> BackupKey:
    return BackupKey.from_text(generate_key(), source)


def _seal(plain: bytes, key: BackupKey) -> bytes:
    out = io.BytesIO()
    encrypt_stream(io.BytesIO(plain), out, key, chunk_size=CHUNK)
    return out.getvalue()


def _open(sealed: bytes, key: BackupKey) -> bytes:
    out = io.BytesIO()
    decrypt_stream(io.BytesIO(sealed), out, key)
    return out.getvalue()


def _chunks(sealed: bytes) -> tuple[bytes, list[bytes]]:
    body = sealed[HEADER_SIZE:]
    return sealed[:HEADER_SIZE], [body[i : i + SEALED] for i in range(0, len(body), SEALED)]


class Trickle(io.RawIOBase):
    """A pipe that hands over at most seven bytes a read."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self.data.read(min(size, 7) if size >= 0 else 7)


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK, 3 * CHUNK + 5])
def test_every_size_comes_back_whole_and_the_file_always_ends_with_a_last_chunk(size: int) -> None:
    key, plain = _key(), os.urandom(size)
    sealed = _seal(plain, key)
    assert _open(sealed, key) == plain
    _, chunks = _chunks(sealed)
    assert len(chunks) == max(1, -(-size // CHUNK))  # an empty dump is one empty last chunk
    assert all(len(c) == SEALED for c in chunks[:-1])


def test_a_sealed_backup_starts_with_its_magic_and_shows_nothing_of_the_dump() -> None:
    key, plain = _key(), b"PGDMP ada@example.com " * 20
    sealed = _seal(plain, key)
    assert sealed.startswith(MAGIC) and b"PGDMP" not in sealed and b"ada@example.com" not in sealed
    assert _seal(plain, key) != sealed  # a fresh salt and nonce every time


def test_a_pipe_that_hands_over_a_few_bytes_at_a_time_is_read_whole() -> None:
    key, plain = _key(), os.urandom(5 * CHUNK + 3)
    out = io.BytesIO()
    encrypt_stream(Trickle(plain), out, key, chunk_size=CHUNK)
    back = io.BytesIO()
    decrypt_stream(Trickle(out.getvalue()), back, key)
    assert back.getvalue() == plain


def test_the_backup_key_is_derived_not_the_key_itself() -> None:
    key = _key()
    header, chunks = _chunks(_seal(b"x" * 10, key))
    nonce = header[-12:]
    with pytest.raises(InvalidTag):
        AESGCM(key.material).decrypt(nonce, chunks[0], None)


def test_another_key_is_refused_by_its_key_id_before_any_chunk_is_read() -> None:
    sealed = _seal(b"dump", _key())
    other = _key()
    with pytest.raises(SealError, match=rf"^wrong key: .* MAILROOM_SECRET_KEY has key id {other.shown}$"):
        _open(sealed, other)


def test_a_backup_made_with_a_key_file_asks_for_a_key_file() -> None:
    sealed = _seal(b"dump", _key(KeySource.KEY_FILE))
    with pytest.raises(SealError, match=r"encrypted with a backup key file .*give it with --key-file PATH"):
        _open(sealed, _key(KeySource.SECRET_KEY))


def test_the_key_id_is_the_one_keys_rotate_reports() -> None:
    text = generate_key()
    assert BackupKey.from_text(text, KeySource.SECRET_KEY).shown == key_id(text)


@pytest.mark.parametrize("text", ["", "not a key", "YWJj"])
def test_a_key_that_is_not_a_key_is_refused(text: str) -> None:
    with pytest.raises(
        SealError, match="does not hold a valid key; create one with `mailroom keys generate`"
    ):
        BackupKey.from_text(text, KeySource.KEY_FILE)


def test_a_flipped_byte_in_the_middle_is_refused() -> None:
    key = _key()
    sealed = bytearray(_seal(os.urandom(4 * CHUNK), key))
    sealed[HEADER_SIZE + 2 * SEALED + 10] ^= 0x01
    with pytest.raises(SealError, match=r"^damaged or tampered with: chunk 2 does not authenticate"):
        _open(bytes(sealed), key)


def test_a_file_cut_after_a_chunk_that_is_not_the_last_is_refused_as_truncated() -> None:
    key = _key()
    header, chunks = _chunks(_seal(os.urandom(4 * CHUNK), key))
    with pytest.raises(SealError, match=r"^truncated: the backup ends after chunk 2, which is not its last$"):
        _open(header + b"".join(chunks[:-1]), key)


def test_a_file_cut_inside_a_chunk_is_refused() -> None:
    key = _key()
    sealed = _seal(os.urandom(4 * CHUNK), key)
    with pytest.raises(SealError, match="chunk 3 does not authenticate"):
        _open(sealed[:-5], key)


@pytest.mark.parametrize("cut", [0, 5])
def test_a_file_cut_in_or_right_after_its_header_is_refused_as_truncated(cut: int) -> None:
    key = _key()
    sealed = _seal(b"dump", key)
    with pytest.raises(SealError, match=r"^truncated: the backup ends"):
        _open(sealed[: HEADER_SIZE - cut], key)


def test_a_chunk_appended_after_the_last_is_refused() -> None:
    key = _key()
    header, chunks = _chunks(_seal(os.urandom(3 * CHUNK), key))
    with pytest.raises(SealError, match=r"^tampered with: data follows chunk 2, the backup's last$"):
        _open(header + b"".join(chunks) + chunks[1], key)


def test_bytes_appended_after_the_last_chunk_are_refused() -> None:
    key = _key()
    sealed = _seal(os.urandom(2 * CHUNK + 1), key)
    with pytest.raises(SealError):
        _open(sealed + b"\n", key)


def test_swapped_chunks_are_refused() -> None:
    key = _key()
    header, chunks = _chunks(_seal(os.urandom(4 * CHUNK), key))
    chunks[1], chunks[2] = chunks[2], chunks[1]
    with pytest.raises(SealError, match="chunk 1 does not authenticate"):
        _open(header + b"".join(chunks), key)


def test_a_chunk_from_another_backup_with_the_same_key_is_refused() -> None:
    key = _key()
    header, chunks = _chunks(_seal(os.urandom(3 * CHUNK), key))
    _, others = _chunks(_seal(os.urandom(3 * CHUNK), key))
    with pytest.raises(SealError, match="chunk 1 does not authenticate"):
        _open(header + chunks[0] + others[1] + chunks[2], key)


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        (len(MAGIC), "encrypted backup format 2; this Mailroom reads format 1"),  # the version
        (len(MAGIC) + 5, "chunk 0 does not authenticate"),  # the chunk size: the header is in every tag
        (len(MAGIC) + 10, "chunk 0 does not authenticate"),  # the salt
        (HEADER_SIZE - 1, "chunk 0 does not authenticate"),  # the base nonce
    ],
)
def test_an_edited_header_is_refused(offset: int, message: str) -> None:
    key = _key()
    sealed = bytearray(_seal(os.urandom(2 * CHUNK), key))
    sealed[offset] ^= 0x03
    with pytest.raises(SealError, match=message):
        _open(bytes(sealed), key)


def test_a_file_of_something_else_is_not_taken_for_a_backup() -> None:
    with pytest.raises(SealError, match=r"^not an encrypted Mailroom backup$"):
        _open(b"PGDMP" + bytes(100), _key())
