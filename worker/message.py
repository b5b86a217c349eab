"""Build the RFC 5322 bytes of a stored email, once, with a stable Message-ID."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime
from typing import Any


@dataclass(frozen=True)
class Envelope:
    """The SMTP envelope and the bytes to send."""

    sender: str
    recipient: str
    message_id: str
    content: bytes


def message_id_for(email_id: int, created_at: datetime, from_email: str) -> str:
    """A Message-ID derived from the email's id: every attempt of one email carries the same one."""
    domain = from_email.rpartition("@")[2] or "mailroom.invalid"
    stamp = int(created_at.timestamp() * 1_000_000)
    return f"<{email_id}.{stamp:x}@{domain}>"


def _address(name: str | None, email: str) -> str:
    local, _, domain = email.rpartition("@")
    return str(Address(display_name=name or "", username=local, domain=domain))


def build_message(email: Mapping[str, Any], from_email: str, from_name: str | None = None) -> Envelope:
    """Turn a stored `email_queue` row into bytes; content is used exactly as stored."""
    msg = EmailMessage(policy=SMTP)
    message_id = message_id_for(int(email["id"]), email["created_at"], from_email)
    msg["From"] = _address(from_name, from_email)
    msg["To"] = _address(email.get("recipient_name"), email["recipient_email"])
    msg["Subject"] = email["subject"]
    msg["Date"] = format_datetime(datetime.now(UTC))
    msg["Message-ID"] = message_id
    for name, value in (email.get("headers") or {}).items():
        msg[name] = value
    text, html = email.get("text_body"), email.get("html_body")
    if text is not None:
        msg.set_content(text)
        if html is not None:
            msg.add_alternative(html, subtype="html")
    else:
        msg.set_content(html or "", subtype="html")
    return Envelope(
        sender=from_email, recipient=email["recipient_email"], message_id=message_id, content=msg.as_bytes()
    )
