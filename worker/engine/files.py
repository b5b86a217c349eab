"""The files of the emails a worker sends: read when the email is built, not when it is claimed.

A claim returns how many files each email carries (`email_queue.attachments`), never their bytes: a
batch of three hundred receipts with a megabyte each would otherwise sit in memory at once. The
email's files are read right before it is built, and each content's base64 lines are kept on a
`Shelf` bounded in bytes, so the same PDF on every email of a batch is read and encoded once.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from worker.core.attachments import File, base64_lines
from worker.engine.rows import ClaimedEmail

SELECT_FILES = """
SELECT position, filename, content_type, content_id, sha256 FROM mailroom.email_attachments
WHERE email_id = %s ORDER BY position
"""
SELECT_CONTENT = "SELECT content FROM mailroom.attachment_contents WHERE sha256 = %s"

# Encoded contents kept for the next emails of a batch: a few large files, or many small ones.
SHELF_BYTES = 32 * 1024 * 1024


class Shelf:
    """Base64 lines of contents by SHA-256, the most recently used kept up to `limit` bytes."""

    def __init__(self, limit: int = SHELF_BYTES) -> None:
        self._limit = limit
        self._size = 0
        self._lines: OrderedDict[bytes, bytes] = OrderedDict()

    async def lines(self, conn: psycopg.AsyncConnection[Any], sha256: bytes) -> bytes:
        """The content's base64 lines, read and encoded unless kept."""
        found = self._lines.get(sha256)
        if found is not None:
            self._lines.move_to_end(sha256)
            return found
        # In binary: the text form of bytea is hex, twice the size, parsed back byte by byte.
        async with conn.cursor(row_factory=tuple_row, binary=True) as cur:
            await cur.execute(SELECT_CONTENT, (sha256,))
            row = await cur.fetchone()
        if row is None:
            raise ValueError("a file's content is missing")
        encoded = base64_lines(bytes(row[0]))
        del row
        self._lines[sha256] = encoded
        self._size += len(encoded)
        while self._size > self._limit and len(self._lines) > 1:
            _, dropped = self._lines.popitem(last=False)
            self._size -= len(dropped)
        return encoded


async def with_files(conn: psycopg.AsyncConnection[Any], shelf: Shelf, email: ClaimedEmail) -> ClaimedEmail:
    """The email with its files (each with its base64 lines) when it carries any; as it is otherwise.
    Raises `ValueError` when its files are not all there (a row written around the door)."""
    if not email.attachments:
        return email
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(SELECT_FILES, (email.id,))
        rows = await cur.fetchall()
    if len(rows) != email.attachments:
        raise ValueError(f"it should carry {email.attachments} file(s), {len(rows)} found")
    files = []
    for position, filename, content_type, content_id, sha256 in rows:
        file = File(position, filename, content_type, content_id, b"")
        files.append((file, await shelf.lines(conn, bytes(sha256))))
    return replace(email, files=tuple(files))
