"""Hostile bounce messages, generated at any size: the shapes that once cost the parser quadratic time or
failed the database, for the test corpus and for `bench.bounce_parse_ladder`."""

from __future__ import annotations

import base64
from collections.abc import Callable

# What a plain bounce looks like from outside: the parser reads its text (the expensive path).
PLAIN = (
    b"From: MAILER-DAEMON@mta.example.net\r\n"
    b"To: bounces@bounces.example\r\n"
    b"Subject: Undelivered Mail Returned to Sender\r\n"
    b"Message-ID: <hostile@mta.example.net>\r\n"
)


def dashes_base64(size: int) -> bytes:
    """A plain bounce whose base64 body decodes to `size` dashes: one line the old copy-marker regex
    took quadratic time over (60 s for 40,000)."""
    body = base64.encodebytes(b"-" * size).replace(b"\n", b"\r\n")
    return PLAIN + b"Content-Transfer-Encoding: base64\r\n\r\n" + body


def single_line(size: int) -> bytes:
    """A plain bounce with one line of `size` dashes and letters (`--copy o...`), not encoded."""
    return PLAIN + b"\r\n" + b"--" + b"copy o-" * (size // 7) + b"\r\n"


def address_line(size: int) -> bytes:
    """A plain bounce with one line of `size` address characters and dots with no end (`a.a.a...@a.a.a...!`)."""
    half = max(1, size // 4)
    return PLAIN + b"\r\n" + b"a." * half + b"@" + b"a." * half + b"!\r\n"


def nested_mime(size: int) -> bytes:
    """Multiparts nested inside each other until `size` bytes: the parser's cost is lines times depth."""
    head, tail, level = [PLAIN, b"MIME-Version: 1.0\r\n"], [], 0
    while sum(map(len, head)) * 2 < size:
        head.append(b'Content-Type: multipart/mixed; boundary="b%d"\r\n\r\n--b%d\r\n' % (level, level))
        tail.append(b"\r\n--b%d--\r\n" % level)
        level += 1
    return b"".join(head) + b"Content-Type: text/plain\r\n\r\nhello\r\n" + b"".join(reversed(tail))


def many_parts(size: int) -> bytes:
    """One multipart with as many small parts as fit in `size` bytes."""
    part = b"--b\r\nContent-Type: text/plain\r\n\r\nx\r\n"
    return (
        PLAIN
        + b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
        + part * max(1, size // len(part))
        + b"--b--\r\n"
    )


def nested_messages(size: int) -> bytes:
    """Returned messages inside returned messages (message/rfc822) until `size` bytes: recursion."""
    layer = b"Content-Type: message/rfc822\r\n\r\n"
    return PLAIN + layer * max(1, size // len(layer)) + b"Subject: x\r\n\r\nhi\r\n"


def huge_header(size: int) -> bytes:
    """A To header of `size` bytes of addresses, and a Subject of `size` bytes."""
    addresses = b", ".join(b"u%d@example.net" % i for i in range(max(1, size // 17)))
    return (
        b"From: MAILER-DAEMON@mta.example.net\r\nTo: "
        + addresses
        + b"\r\nSubject: Undelivered "
        + b"x" * size
        + b"\r\n\r\nno.such.user@example.net\r\n550 5.1.1 unknown\r\n"
    )


def many_headers(size: int) -> bytes:
    """As many short headers as fit in `size` bytes."""
    return PLAIN + b"X-Filler: y\r\n" * max(1, size // 13) + b"\r\nbody\r\n"


def many_recipients(size: int) -> bytes:
    """A plain bounce naming as many failed addresses (each with a status) as fit in `size` bytes."""
    line = b"user%08d@example.net\r\n550 5.1.1 unknown user\r\n\r\n"
    lines = b"".join(line.replace(b"%08d", b"%08d" % i) for i in range(max(1, size // len(line))))
    return PLAIN + b"\r\n" + lines


def many_status_blocks(size: int) -> bytes:
    """A DSN with as many per-recipient field blocks as fit in `size` bytes."""
    block = b"Final-Recipient: rfc822; r@example.net\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n"
    return (
        b"From: MAILER-DAEMON@mta.example.net\r\nTo: bounces@bounces.example\r\n"
        b'MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary="r"\r\n\r\n'
        b"--r\r\nContent-Type: text/plain\r\n\r\nfailed\r\n"
        b"--r\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mta.example.net\r\n\r\n"
        + block * max(1, size // len(block))
        + b"--r--\r\n"
    )


def blank_lines(size: int) -> bytes:
    """A delivery-status part of white space lines (`\\n \\n \\n`), the field-block split's worst case."""
    return (
        b"From: MAILER-DAEMON@mta.example.net\r\nTo: bounces@bounces.example\r\n"
        b'MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary="r"\r\n\r\n'
        b"--r\r\nContent-Type: message/delivery-status\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        + base64.encodebytes(b"Reporting-MTA: dns; x\n" + b" \n" * (size // 2) + b" x")
        + b"--r--\r\n"
    )


# Every shape, by name: each takes a size in bytes (of its hostile part) and returns the message.
SHAPES: dict[str, Callable[[int], bytes]] = {
    "dashes_base64": dashes_base64,
    "single_line": single_line,
    "address_line": address_line,
    "nested_mime": nested_mime,
    "many_parts": many_parts,
    "nested_messages": nested_messages,
    "huge_header": huge_header,
    "many_headers": many_headers,
    "many_recipients": many_recipients,
    "many_status_blocks": many_status_blocks,
    "blank_lines": blank_lines,
}


def dsn(return_path: str, *, diagnostic: bytes = b"smtp; 550 5.1.1 unknown user", **fields: bytes) -> bytes:
    """A DSN to `return_path` about `no-such-user@mta.example.net`, any field given raw (NUL, bad bytes)."""
    values = {
        "message_id": b"<dsn-1@mta.example.net>",
        "final": b"rfc822; no-such-user@mta.example.net",
        "action": b"failed",
        "status": b"5.1.1",
        "subject": b"Undelivered Mail Returned to Sender",
        "reporting": b"dns; mta.example.net",
        **fields,
    }
    return (
        b"From: MAILER-DAEMON@mta.example.net\r\nTo: "
        + return_path.encode()
        + b"\r\nSubject: "
        + values["subject"]
        + b"\r\nMessage-ID: "
        + values["message_id"]
        + b'\r\nMIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary="r"\r\n\r\n'
        b"--r\r\nContent-Type: text/plain\r\n\r\nDelivery failed.\r\n"
        b"--r\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: "
        + values["reporting"]
        + b"\r\n\r\nFinal-Recipient: "
        + values["final"]
        + b"\r\nAction: "
        + values["action"]
        + b"\r\nStatus: "
        + values["status"]
        + b"\r\nDiagnostic-Code: "
        + diagnostic
        + b"\r\n\r\n--r--\r\n"
    )


# Fields of a DSN an attacker fills with what the database or the codec refuses: each must end recorded.
NUL = b"\x00"
INVALID_UTF8 = b"\xff\xfe\xc3("
# U+D800 encoded as UTF-8 (never valid), raw and inside an RFC 2047 encoded word.
SURROGATE = b"\xed\xa0\x80"
SURROGATE_WORD = b"=?utf-8?b?" + base64.b64encode(SURROGATE) + b"?="

HOSTILE_FIELDS: dict[str, dict[str, bytes]] = {
    "nul_in_diagnostic": {"diagnostic": b"smtp; 550 5.1.1 unknown" + NUL + b"user"},
    "nul_in_message_id": {"message_id": b"<dsn" + NUL + b"1@mta.example.net>"},
    "nul_in_status": {"status": b"5.1.1" + NUL},
    "nul_in_action": {"action": b"failed" + NUL},
    "nul_in_final_recipient": {"final": b"rfc822; no-such-user@mta.example.net" + NUL},
    "nul_in_subject": {"subject": b"Undelivered" + NUL},
    "nul_in_reporting_mta": {"reporting": b"dns; mta" + NUL + b".example.net"},
    "invalid_utf8_in_diagnostic": {"diagnostic": b"smtp; 550 5.1.1 " + INVALID_UTF8},
    "invalid_utf8_in_message_id": {"message_id": b"<dsn" + INVALID_UTF8 + b"@mta.example.net>"},
    "surrogate_in_diagnostic": {"diagnostic": b"smtp; 550 5.1.1 " + SURROGATE},
    "surrogate_word_in_diagnostic": {"diagnostic": b"smtp; 550 5.1.1 " + SURROGATE_WORD},
    "surrogate_word_in_subject": {"subject": SURROGATE_WORD},
    "giant_diagnostic": {"diagnostic": b"smtp; 550 5.1.1 " + b"x" * 200_000},
    "giant_message_id": {"message_id": b"<" + b"m" * 100_000 + b"@mta.example.net>"},
}
