"""Attachments as JSON lines give them and as the wire carries them: pure, no database."""

from __future__ import annotations

import base64
from email import message_from_bytes
from email.policy import default as default_policy

import pytest

from worker.core.attachments import (
    Attachment,
    attachments_from_json,
    base64_lines,
    check_files,
    part_head,
    with_files,
)
from worker.core.validation import ValidationError

PDF = bytes(range(256)) * 3


def test_json_base64_may_be_wrapped_in_lines_as_encoders_write_it() -> None:
    wrapped = base64.encodebytes(PDF).decode()  # 76 characters a line, each ended by a newline
    assert "\n" in wrapped
    (file,) = attachments_from_json([{"filename": "a.pdf", "content": wrapped}]) or []
    assert file.content == PDF
    with pytest.raises(ValidationError, match=r"attachments\[1\]\.content: is not valid base64"):
        attachments_from_json([{"filename": "a.pdf", "content": "not base64!"}])


def test_a_name_that_is_not_plain_travels_percent_encoded_and_every_part_decodes_to_its_bytes() -> None:
    files = check_files(
        [Attachment('Rechnung "März".pdf', PDF), Attachment("logo.png", b"\x89PNG", content_id="logo")],
        '<img src="cid:logo">',
        10_000,
        10_000,
    )
    assert b"filename*=utf-8''Rechnung%20%22M%C3%A4rz%22.pdf" in part_head(files[0])
    assert b"\r\n\r\n" not in part_head(files[0])[:-4]  # one blank line: the end of the head
    lines = base64_lines(PDF)
    assert all(len(line) <= 76 for line in lines.split(b"\r\n"))
    body = b'Content-Type: text/html; charset="utf-8"\r\n\r\n<img src="cid:logo">\r\n'
    head = b"From: a@example.org\r\nTo: b@example.org\r\nSubject: s\r\nMIME-Version: 1.0\r\n"
    pieces = with_files(body, [(f, base64_lines(f.content)) for f in files], "=_b")
    message = message_from_bytes(head + b"".join(pieces), policy=default_policy)
    assert message.get_content_type() == "multipart/mixed"
    parts = {p.get_filename(): p for p in message.walk() if p.get_filename()}
    assert parts['Rechnung "März".pdf'].get_payload(decode=True) == PDF
    assert parts["logo.png"]["Content-ID"] == "<logo>"
