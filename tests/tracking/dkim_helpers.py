"""DKIM test helpers: sample messages, header and body strategies, and a DNS answer for a key."""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st

from worker.core.dkim import SIGNED_HEADERS, dns_record, normalise_private_key


@functools.cache
def _record(pem: bytes) -> bytes:
    """The TXT record for a key (cached: loading an RSA key validates it, ~50 ms)."""
    return dns_record(normalise_private_key(pem)).encode("ascii")


def _dns(pem: bytes, name: bytes = b"mail2026._domainkey.example.org.") -> Any:
    record = _record(pem)

    def lookup(query: bytes, timeout: int = 5) -> bytes | None:
        return record if query == name else None

    return lookup


UNSUBSCRIBE = {
    "List-Unsubscribe": "<https://t.example.org/u/0f6c2a84-6d4f-4e8e-9b3b-3c1c8d0b2a11>, "
    "<mailto:unsubscribe@example.org?subject=unsubscribe%200f6c2a84-6d4f-4e8e-9b3b-3c1c8d0b2a11>",
    "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
}


STAMP = 1_700_000_000  # a fixed t= in the past (dkimpy refuses one in the future)


PLAIN = (
    b"From: News <news@example.org>\r\n"
    b"To: reader@example.com\r\n"
    b"Subject: Hello\r\n"
    b"Message-ID: <1.2@example.org>\r\n"
    b"\r\n"
    b"Hello reader\r\n"
)


_FOLDS = st.sampled_from(["\r\n ", "\r\n\t", "\r\n \t  "])


_HEADER_TEXT = st.text(alphabet="aZ09 \t=;:<>@.,-\u00e9\u20ac", max_size=24)


_NAMES = st.sampled_from(
    [
        *SIGNED_HEADERS[:10],
        "FROM",
        "Subject",
        "To",
        "List-Unsubscribe",
        "X-Mailer",
        "Received",
        "Cc",
        "x-entity-ref-id",
    ]
)


_FIELD = st.tuples(_NAMES, st.lists(_HEADER_TEXT, min_size=1, max_size=3), _FOLDS).map(
    lambda t: f"{t[0]}:{t[2].join(t[1])}\r\n".encode()
)


_BODY_LINE = st.text(alphabet="ab Z9 \t.\u00fc\u20ac", max_size=40).map(str.encode) | st.binary(
    max_size=30
).map(lambda raw: raw.replace(b"\n", b"").replace(b"\r", b""))
