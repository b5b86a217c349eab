"""Attachments and inline images: what an application hands in, checked once, and their MIME parts.

The database holds each content once per SHA-256 (`mailroom.attachment_contents`) and each email's
files in order (`mailroom.email_attachments`), with the same checks on filename, content type and
Content-ID as here (revision 0013): a file written around the API is refused there too.

A part's base64 is written straight into bytes, 76 characters a line: no `email` object, no text copy
of the message. The worker builds the parts of one content once and shares them between the emails
that carry it (`worker.engine.files`).
"""

from __future__ import annotations

import binascii
import mimetypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from worker.core.validation import ValidationError

# As the database's constraints (migrations/versions/0013/20_attachments.sql) say.
_CONTENT_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
_CONTENT_ID = re.compile(r"^[A-Za-z0-9._+-]{1,64}(@[A-Za-z0-9.-]{1,190})?$")
_FILENAME_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f/\\\u0085\u2028\u2029]")
# A filename that can go in a quoted parameter as it is.
_PLAIN_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()+-]{0,70}$")
MAX_FILES = 100
DEFAULT_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class Attachment:
    """One file of an email.

    filename: the name the recipient sees (no path, no control character, at most 255 characters).
    content: the bytes.
    content_type: like `"application/pdf"`; guessed from the filename when not given (else
        `application/octet-stream`).
    content_id: makes the file an inline image the HTML shows as `<img src="cid:CONTENT_ID">`
        (letters, digits, `._+-`, optionally `@domain`); the HTML must refer to it.
    """

    filename: str
    content: bytes
    content_type: str | None = None
    content_id: str | None = None


Attachment.__module__ = "mailroom"  # shown, and pickled, under its public name


@dataclass(frozen=True, slots=True)
class File:
    """A checked file as it is stored: its place among the email's files from 1, and what the row needs."""

    position: int
    filename: str
    content_type: str
    content_id: str | None
    content: bytes


def check_files(
    attachments: Sequence[Attachment] | None,
    html: str | None,
    max_file_bytes: int,
    max_total_bytes: int,
) -> tuple[File, ...]:
    """The files checked and numbered, or `ValidationError` naming the one at fault (`attachments[1]` is
    the first). Each inline file's Content-ID must appear in the HTML after `cid:` when there is HTML
    (a template rendered later by the worker is checked there)."""
    if not attachments:
        return ()
    if isinstance(attachments, Attachment | dict | str | bytes):
        raise ValidationError("attachments", "must be a list of files")
    if len(attachments) > MAX_FILES:
        raise ValidationError("attachments", f"at most {MAX_FILES} files")
    files: list[File] = []
    total = 0
    ids: set[str] = set()
    for position, given in enumerate(attachments, 1):
        label = f"attachments[{position}]"
        if not isinstance(given, Attachment):
            raise ValidationError(label, "must be an Attachment(filename=..., content=...)")
        file = _check_one(label, position, given, max_file_bytes)
        if file.content_id is not None:
            if file.content_id.lower() in ids:
                raise ValidationError(f"{label}.content_id", f"{file.content_id!r} is given twice")
            ids.add(file.content_id.lower())
            if html is not None and f"cid:{file.content_id}" not in html:
                raise ValidationError(
                    f"{label}.content_id", f"the html never shows it (no cid:{file.content_id})"
                )
        total += len(file.content)
        files.append(file)
    if total > max_total_bytes:
        raise ValidationError(
            "attachments",
            f"{total} bytes of files exceed the {max_total_bytes}-byte limit (MAILROOM_MAX_ATTACHMENTS_BYTES)",
        )
    return tuple(files)


def _check_one(label: str, position: int, given: Attachment, max_bytes: int) -> File:
    filename = given.filename
    if not isinstance(filename, str) or not 1 <= len(filename) <= 255 or filename in (".", ".."):
        raise ValidationError(f"{label}.filename", "a name of 1 to 255 characters is required")
    if match := _FILENAME_FORBIDDEN.search(filename):
        raise ValidationError(f"{label}.filename", f"{match.group()!r} is not allowed: a name, never a path")
    content = given.content
    if not isinstance(content, bytes | bytearray | memoryview):
        raise ValidationError(f"{label}.content", "must be bytes")
    content = bytes(content)
    if not content:
        raise ValidationError(f"{label}.content", "the file is empty")
    if len(content) > max_bytes:
        raise ValidationError(
            f"{label}.content",
            f"{len(content)} bytes exceed the {max_bytes}-byte limit (MAILROOM_MAX_ATTACHMENT_BYTES)",
        )
    content_type = given.content_type
    if content_type is None:
        content_type = mimetypes.guess_type(filename, strict=False)[0] or DEFAULT_TYPE
    if not isinstance(content_type, str) or not _CONTENT_TYPE.match(content_type.lower()):
        raise ValidationError(f"{label}.content_type", "must be type/subtype, like application/pdf")
    content_id = given.content_id
    if content_id is not None and (not isinstance(content_id, str) or not _CONTENT_ID.match(content_id)):
        raise ValidationError(
            f"{label}.content_id", "letters, digits and ._+- (optionally @domain), at most 64 before the @"
        )
    return File(position, filename, content_type.lower(), content_id, content)


def attachment_from_json(position: int, obj: object) -> Attachment:
    """One file of a JSON line: `{"filename", "content" (base64), "content_type", "content_id"}`."""
    label = f"attachments[{position}]"
    if not isinstance(obj, dict):
        raise ValidationError(label, 'must be {"filename": ..., "content": base64, ...}')
    unknown = set(obj) - {"filename", "content", "content_type", "content_id"}
    if unknown:
        raise ValidationError(f"{label}.{sorted(unknown)[0]}", "unknown field")
    encoded = obj.get("content")
    if not isinstance(encoded, str):
        raise ValidationError(f"{label}.content", "must be base64 text")
    try:  # base64 as encoders write it, wrapped in lines or not (as PostgreSQL's decode takes it)
        content = binascii.a2b_base64("".join(encoded.split()), strict_mode=True)
    except binascii.Error:
        raise ValidationError(f"{label}.content", "is not valid base64") from None
    for key in ("filename", "content_type", "content_id"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise ValidationError(f"{label}.{key}", "must be a string")
    return Attachment(obj.get("filename") or "", content, obj.get("content_type"), obj.get("content_id"))


def attachments_from_json(value: object) -> list[Attachment] | None:
    """A JSON line's `attachments`: a list of files, or None."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValidationError("attachments", "must be a list of files")
    return [attachment_from_json(position, obj) for position, obj in enumerate(value, 1)]


# -- the wire ------------------------------------------------------------------------------------


def _disposition(file: File) -> str:
    kind = "inline" if file.content_id is not None else "attachment"
    name = file.filename
    if _PLAIN_FILENAME.match(name):
        return f'{kind}; filename="{name}"'
    # RFC 2231: any other name, UTF-8 and percent-encoded, so no character of it can reach the header.
    return f"{kind}; filename*=utf-8''{quote(name, safe='')}"


def part_head(file: File) -> bytes:
    """The headers of one file's part (without the boundary line before them)."""
    name_param = _disposition(file).partition("; ")[2].replace("filename", "name", 1)
    head = (
        f"Content-Type: {file.content_type}; {name_param}\r\n"
        f"Content-Disposition: {_disposition(file)}\r\n"
        "Content-Transfer-Encoding: base64\r\n"
    )
    if file.content_id is not None:
        head += f"Content-ID: <{file.content_id}>\r\n"
    return (head + "\r\n").encode("ascii")


def base64_lines(content: bytes) -> bytes:
    """The content as base64 in lines of 76 characters, each ended by CRLF (RFC 2045)."""
    # 57 bytes make 76 characters; b2a_base64 ends each with \n, written as \r\n.
    return b"".join(
        binascii.b2a_base64(content[i : i + 57])[:-1] + b"\r\n" for i in range(0, len(content), 57)
    )


def with_files(entity: bytes, files: Sequence[tuple[File, bytes]], boundary: str) -> list[bytes]:
    """The pieces (to be joined once) of a message's top entity with its files: `entity` is the text body
    with its own Content-Type (a text part or multipart/alternative); the inline images go beside it in
    multipart/related, and the attachments after that in multipart/mixed. `files` are each file with
    its base64 lines (`base64_lines`, shared by the emails that carry the same content)."""
    pieces = [entity]
    inline = [
        piece for file, lines in files if file.content_id is not None for piece in (part_head(file), lines)
    ]
    attached = [
        piece for file, lines in files if file.content_id is None for piece in (part_head(file), lines)
    ]
    if inline:
        pieces = _wrap("related", f"{boundary}_r", pieces, inline)
    if attached:
        pieces = _wrap("mixed", f"{boundary}_m", pieces, attached)
    return pieces


def _wrap(subtype: str, boundary: str, entity: list[bytes], parts: list[bytes]) -> list[bytes]:
    """A multipart entity: `entity` first, then each part (its head and its lines, two pieces each)."""
    line = f"--{boundary}\r\n".encode("ascii")
    pieces = [
        f'Content-Type: multipart/{subtype}; boundary="{boundary}"\r\n\r\n'.encode("ascii"),
        line,
        *entity,
    ]
    for start in range(0, len(parts), 2):
        pieces += [line, parts[start], parts[start + 1]]
    pieces.append(f"--{boundary}--\r\n".encode("ascii"))
    return pieces
