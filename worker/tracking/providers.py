"""Email services' own bounce webhooks, as they document them: Postmark's and SendGrid's payloads and checks.

Pure functions: the routes in `worker.tracking.webhooks` call them. A provider's event that is not a
bounce or complaint (a delivery, an open) is ignored with the reason, never an error, so the
provider does not retry it forever.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_der_public_key

from worker.core.config import ConfigError
from worker.core.webhook_events import EventKind, WebhookEvent

PublicKey = ec.EllipticCurvePublicKey
# An event, or why it was ignored.
Mapped = WebhookEvent | str

SENDGRID_SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"
SENDGRID_TIMESTAMP = "X-Twilio-Email-Event-Webhook-Timestamp"
# SendGrid posts batches of up to a few thousand events (by size, about 768 KiB); more is not SendGrid.
MAX_BATCH = 10_000

_STATUS = re.compile(r"\b[245]\.\d{1,3}\.\d{1,3}\b")
_SMTP_CODE = re.compile(r"^\s*([245]\d\d)\b")

# Postmark's bounce types (its "Type" field) that say something about the address.
POSTMARK_KINDS: dict[str, EventKind] = {
    "HardBounce": "hard",
    "BadEmailAddress": "hard",
    "SoftBounce": "soft",
    "Transient": "soft",
    "DnsError": "soft",
    "Blocked": "soft",
    "SpamComplaint": "complaint",
}
# SendGrid drops mail to addresses on its own suppression lists; these reasons say why.
SENDGRID_DROPPED: dict[str, EventKind] = {
    "bounced address": "hard",
    "invalid": "hard",
    "spam reporting address": "complaint",
}


class PayloadError(ValueError):
    """The payload is not what the webhook expects (a 400)."""


def clean(value: Any, cap: int) -> str | None:
    """A payload value as text PostgreSQL can hold (no NUL, no lone surrogate), capped; None when empty."""
    if value is None or isinstance(value, bool | dict | list):
        return None
    text = str(value).replace("\x00", "").encode("utf-8", "replace").decode("utf-8").strip()
    return text[:cap] or None


def smtp_code(text: str | None) -> int | None:
    """The SMTP reply code a diagnostic starts with (`550 5.1.1 ...`), if any."""
    match = _SMTP_CODE.match(text or "")
    return int(match.group(1)) if match else None


def enhanced_status(text: str | None) -> str | None:
    """The first enhanced status code (`5.1.1`) in a diagnostic, if any."""
    match = _STATUS.search(text or "")
    return match.group(0) if match else None


def _email_id(value: Any) -> int | None:
    text = clean(value, 20)
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def basic_auth_ok(header: str | None, user: str, password: str) -> bool:
    """Whether an Authorization header carries exactly these basic credentials (UTF-8, constant-time compare)."""
    scheme, _, encoded = (header or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        login, colon, given = base64.b64decode(encoded.strip(), validate=True).partition(b":")
    except (ValueError, binascii.Error):
        return False
    user_ok = hmac.compare_digest(login, user.encode("utf-8"))
    password_ok = hmac.compare_digest(given, password.encode("utf-8"))
    return bool(colon) and user_ok and password_ok


def map_postmark(payload: Any) -> list[Mapped]:
    """Postmark's Bounce or SpamComplaint webhook (one record per request) as an event."""
    if not isinstance(payload, dict):
        raise PayloadError("expected a Postmark webhook record (an object)")
    record = str(payload.get("RecordType"))
    if record not in ("Bounce", "SpamComplaint"):
        return [f"Postmark {clean(record, 40)} record"]
    kind = "complaint" if record == "SpamComplaint" else POSTMARK_KINDS.get(str(payload.get("Type")))
    if kind is None:
        return [f"Postmark bounce type {clean(payload.get('Type'), 40)}"]
    recipient = clean(payload.get("Email"), 254)
    if recipient is None or "@" not in recipient:
        raise PayloadError("Email must be an address")
    metadata = payload.get("Metadata")
    details = clean(payload.get("Details"), 1000)
    record_id = clean(payload.get("ID"), 100)
    return [
        WebhookEvent(
            source="postmark",
            recipient=recipient,
            kind=kind,
            event_id=f"{record}:{record_id}" if record_id else None,
            raw=json.dumps(payload, sort_keys=True).encode("utf-8", "replace"),
            email_id=_email_id(metadata.get("mailroom_email_id")) if isinstance(metadata, dict) else None,
            message_id=clean(payload.get("MessageID"), 998),
            status=enhanced_status(details) or clean(payload.get("Type"), 32),
            diagnostic=details or clean(payload.get("Description"), 1000),
            smtp_code=smtp_code(details),
        )
    ]


def load_sendgrid_key(configured: str | None) -> PublicKey | None:
    """The verification key as SendGrid shows it (base64 DER, or PEM); `ConfigError` when it is not a P-256 key."""
    if not configured:
        return None
    text = configured.strip()
    try:
        if "BEGIN PUBLIC KEY" in text:
            text = "".join(line for line in text.splitlines() if "-----" not in line)
        key = load_der_public_key(base64.b64decode(text, validate=True))
    except (ValueError, binascii.Error, TypeError) as exc:
        raise ConfigError(f"MAILROOM_SENDGRID_WEBHOOK_PUBLIC_KEY is not a public key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise ConfigError("MAILROOM_SENDGRID_WEBHOOK_PUBLIC_KEY must be an ECDSA P-256 key")
    return key


def sendgrid_verified(key: PublicKey, signature: str, timestamp: str, body: bytes) -> bool:
    """Whether SendGrid signed `timestamp + body` (ECDSA P-256, SHA-256, base64 DER signature)."""
    try:
        raw = base64.b64decode(signature.strip(), validate=True)
        key.verify(raw, timestamp.strip().encode("ascii") + body, ec.ECDSA(hashes.SHA256()))
    except (ValueError, binascii.Error, UnicodeEncodeError, InvalidSignature):
        return False
    return True


def map_sendgrid(payload: Any) -> list[Mapped]:
    """SendGrid's Event Webhook batch (a list of events) as events: bounces, drops, deferrals, spam reports."""
    if not isinstance(payload, list):
        raise PayloadError("expected a list of SendGrid events")
    if len(payload) > MAX_BATCH:
        raise PayloadError(f"expected at most {MAX_BATCH} SendGrid events")
    return [_sendgrid_event(item) for item in payload]


def _sendgrid_kind(item: dict[str, Any]) -> tuple[EventKind | None, str]:
    """The kind of a SendGrid event, or None and why it is ignored."""
    event = clean(item.get("event"), 40)
    if event == "bounce":
        return ("soft" if clean(item.get("type"), 20) == "blocked" else "hard"), ""
    if event == "deferred":
        return "soft", ""
    if event == "spamreport":
        return "complaint", ""
    if event == "dropped":
        reason = (clean(item.get("reason"), 200) or "").lower()
        return SENDGRID_DROPPED.get(reason), f"SendGrid dropped ({reason or 'no reason'})"
    return None, f"SendGrid {event} event"


def _sendgrid_event(item: Any) -> Mapped:
    if not isinstance(item, dict):
        return "not a SendGrid event (an object)"
    kind, why = _sendgrid_kind(item)
    if kind is None:
        return why
    recipient = clean(item.get("email"), 254)
    if recipient is None or "@" not in recipient:
        return "SendGrid event without an address"
    diagnostic = clean(item.get("reason") or item.get("response"), 1000)
    return WebhookEvent(
        source="sendgrid",
        recipient=recipient,
        kind=kind,
        event_id=clean(item.get("sg_event_id"), 200),
        raw=json.dumps(item, sort_keys=True).encode("utf-8", "replace"),
        email_id=_email_id(item.get("mailroom_email_id")),
        message_id=clean(item.get("smtp-id"), 998) or clean(item.get("sg_message_id"), 998),
        status=clean(item.get("status"), 32) or enhanced_status(diagnostic),
        diagnostic=diagnostic,
        smtp_code=smtp_code(diagnostic),
    )
