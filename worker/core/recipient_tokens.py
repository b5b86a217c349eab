"""Tokens that name one recipient of one email to the outside world: Message-IDs and unsubscribe links.

Reports and clicks from outside act only on what an authentic token names. A Message-ID is
`<id.rcpt.mac@domain>`: the email id, the keyed hash of the recipient its copy went to (8 base32
characters, as the VERP return path carries it, so the address never shows) and an HMAC-SHA256 of
both truncated to 80 bits. It is stable per email and recipient, and no recipient can write the
Message-ID of another email or of another recipient of the same email. An email with several
recipients sends each its own copy, so each copy carries its own Message-ID and its own
unsubscribe link (`/u/<token>.<mac>`, the mac binding the email's unsubscribe token to the address).
The key is the return-path key (`worker.core.return_path.bounce_key`); each token has its own MAC
context, so one kind of token is never valid as another.
"""

from __future__ import annotations

import hmac
import re
import uuid

from worker.core.return_path import b32_prefix, keyed_digest, recipient_hash

_MAC_CHARS = 16  # 80 bits
# Bounded repetitions only: a reported Message-ID is untrusted text. Both are matched whole
# (fullmatch): a `$` would also match before a final newline (`/u/TOKEN%0A`).
_MESSAGE_ID = re.compile(r"<?(\d{1,19})\.([a-z2-7]{8})\.([a-z2-7]{16})@[^<>\s@]{1,255}>?")
_UNSUBSCRIBE = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:\.([a-z2-7]{16}))?"
)


def _mac(context: bytes, body: str, key: bytes) -> str:
    return b32_prefix(keyed_digest(key, context + b"\0" + body.encode("utf-8")), _MAC_CHARS)


def message_id(email_id: int, recipient: str, domain: str, key: bytes) -> str:
    """The Message-ID of the copy of an email sent to `recipient`."""
    body = f"{email_id}.{recipient_hash(recipient, key)}"
    return f"<{body}.{_mac(b'message-id', body, key)}@{domain}>"


def parse_message_id(value: str, key: bytes) -> tuple[int, str] | None:
    """(email id, recipient hash) of an authentic Mailroom Message-ID; None for anything else."""
    match = _MESSAGE_ID.fullmatch(value.strip().lower())
    if match is None:
        return None
    body = f"{match.group(1)}.{match.group(2)}"
    if not hmac.compare_digest(_mac(b"message-id", body, key), match.group(3)):
        return None
    email_id = int(match.group(1))
    return (email_id, match.group(2)) if email_id < 2**63 else None


def unsubscribe_token(token: uuid.UUID | str, recipient: str, key: bytes) -> str:
    """The unsubscribe token of one recipient of an email with several: `<token>.<mac>`."""
    text = str(token).lower()
    return f"{text}.{_mac(b'unsubscribe', text + chr(0) + recipient.strip().lower(), key)}"


def parse_unsubscribe_token(value: str) -> tuple[uuid.UUID, str | None] | None:
    """The email's unsubscribe token and the recipient's mac (None for the plain token); None if malformed."""
    match = _UNSUBSCRIBE.fullmatch(value.lower())
    if match is None:
        return None
    return uuid.UUID(match.group(1)), match.group(2)


def unsubscribe_names(token: uuid.UUID, mac: str, recipient: str, key: bytes) -> bool:
    """Whether a recipient's unsubscribe mac was made for this address."""
    return hmac.compare_digest(unsubscribe_token(token, recipient, key), f"{token}.{mac}")
