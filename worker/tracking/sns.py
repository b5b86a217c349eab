"""Amazon SES bounces and complaints through SNS: the message signature, the subscription, the SES payload.

SNS signs a canonical string of the message's fields with the private key of a certificate it
names by URL (SignatureVersion 1: SHA1withRSA, 2: SHA256withRSA). Mailroom fetches that
certificate only over https from a host under amazonaws.com (TLS vouches for it), caches it, and
takes messages only from the topics configured, since any AWS account can sign messages of its own
topics. A subscription is confirmed by GETting its SubscribeURL, under the same host rule.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from worker.core.webhook_events import EventKind, WebhookEvent
from worker.tracking.providers import Mapped, PayloadError, clean, enhanced_status, smtp_code

# GET an https URL and return its body (injected in tests; `fetch` below in production).
HttpsGet = Callable[[str], Awaitable[bytes]]

MAX_CERTIFICATE = 64 * 1024
# SNS retries an HTTP endpoint for up to an hour under the longest delivery policies.
MAX_AGE_SECONDS = 3600
_SIGNED = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")
FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": _SIGNED,
    "UnsubscribeConfirmation": _SIGNED,
}
_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
SES_KINDS: dict[str, EventKind] = {"Permanent": "hard", "Transient": "soft", "Undetermined": "soft"}


def amazon_url(url: Any) -> bool:
    """Whether a URL is https on a host under amazonaws.com (and carries no credentials or odd port)."""
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    host = (parts.hostname or "").lower()
    return (
        parts.scheme == "https"
        and host.endswith(".amazonaws.com")
        and parts.username is None
        and port in (None, 443)
    )


async def fetch(url: str) -> bytes:
    """GET an https URL (a certificate, a SubscribeURL): its body, at most 64 KiB, within 10 seconds."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url, allow_redirects=False) as resp:
        resp.raise_for_status()
        return await resp.content.read(MAX_CERTIFICATE)


def canonical(message: dict[str, Any]) -> bytes | None:
    """The string SNS signed for this message type, or None when a signed field is missing."""
    fields = FIELDS.get(str(message.get("Type")))
    if fields is None:
        return None
    out: list[str] = []
    for name in fields:
        value = message.get(name)
        if value is None and name == "Subject":
            continue  # a notification without a subject signs without it
        if not isinstance(value, str):
            return None
        out.append(f"{name}\n{value}\n")
    return "".join(out).encode("utf-8", "surrogatepass")


def fresh(message: dict[str, Any], now: float) -> bool:
    """Whether the message's Timestamp is within the hour SNS may go on retrying."""
    try:
        at = datetime.fromisoformat(str(message.get("Timestamp")).replace("Z", "+00:00"))
    except ValueError:
        return False
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return abs(now - at.timestamp()) <= MAX_AGE_SECONDS


class SnsVerifier:
    """Checks SNS signatures against certificates fetched from AWS, kept per URL once fetched."""

    def __init__(self, https_get: HttpsGet = fetch, cache_size: int = 32) -> None:
        self.https_get = https_get
        self.cache_size = cache_size
        self._keys: OrderedDict[str, rsa.RSAPublicKey] = OrderedDict()

    async def refusal(self, message: dict[str, Any], now: float) -> str | None:
        """None when SNS signed this message; else why not. Fetching a certificate may raise (network)."""
        algorithm = _HASHES.get(str(message.get("SignatureVersion")))
        signed = canonical(message)
        url = message.get("SigningCertURL")
        if algorithm is None or signed is None:
            return "not a signed SNS message"
        if not amazon_url(url):
            return "signing certificate is not on an https amazonaws.com host"
        if not fresh(message, now):
            return "stale or missing Timestamp"
        try:
            signature = base64.b64decode(str(message.get("Signature")), validate=True)
        except (ValueError, binascii.Error):
            return "signature is not base64"
        key = await self._key(str(url))
        if key is None:
            return "signing certificate is unusable"
        try:
            key.verify(signature, signed, padding.PKCS1v15(), algorithm())
        except InvalidSignature:
            return "bad signature"
        return None

    async def _key(self, url: str) -> rsa.RSAPublicKey | None:
        if url in self._keys:
            self._keys.move_to_end(url)
            return self._keys[url]
        try:
            certificate = x509.load_pem_x509_certificate(await self.https_get(url))
        except ValueError:
            return None
        now = datetime.now(UTC)
        key = certificate.public_key()
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            return None
        if not isinstance(key, rsa.RSAPublicKey):
            return None
        self._keys[url] = key
        if len(self._keys) > self.cache_size:
            self._keys.popitem(last=False)
        return key


def parse_sns(body: Any) -> dict[str, Any]:
    """The SNS message a request carries; `PayloadError` when it is not one."""
    if not isinstance(body, dict) or str(body.get("Type")) not in FIELDS:
        raise PayloadError(
            "expected an SNS message (Notification, SubscriptionConfirmation, UnsubscribeConfirmation)"
        )
    return body


def map_ses(message: dict[str, Any]) -> list[Mapped]:
    """The SES bounce or complaint an SNS Notification carries, one event per recipient."""
    try:
        ses = json.loads(str(message["Message"]))
    except ValueError:
        return ["SNS notification that is not SES JSON"]
    if not isinstance(ses, dict):
        return ["SNS notification that is not SES JSON"]
    kind_name = ses.get("notificationType") or ses.get("eventType")
    mail: dict[str, Any] = ses["mail"] if isinstance(ses.get("mail"), dict) else {}
    if kind_name == "Bounce" and isinstance(ses.get("bounce"), dict):
        report, key, recipients = ses["bounce"], "bouncedRecipients", "bounce"
    elif kind_name == "Complaint" and isinstance(ses.get("complaint"), dict):
        report, key, recipients = ses["complaint"], "complainedRecipients", "complaint"
    else:
        return [f"SES {clean(kind_name, 40)} notification"]
    listed = report.get(key)
    if not isinstance(listed, list):
        return [f"SES {recipients} without recipients"]
    return [_ses_event(r, report, recipients, mail, message) for r in listed]


def _message_id(mail: dict[str, Any]) -> str | None:
    common = mail.get("commonHeaders")
    if isinstance(common, dict) and common.get("messageId"):
        return clean(common.get("messageId"), 998)
    for header in mail.get("headers") or []:
        if isinstance(header, dict) and str(header.get("name")).lower() == "message-id":
            return clean(header.get("value"), 998)
    return None


def _ses_event(
    recipient: Any, report: dict[str, Any], what: str, mail: dict[str, Any], message: dict[str, Any]
) -> Mapped:
    if not isinstance(recipient, dict):
        return f"SES {what} recipient that is not an object"
    address = clean(recipient.get("emailAddress"), 254)
    if address is None or "@" not in address:
        return f"SES {what} recipient without an address"
    kind: EventKind | None = (
        "complaint" if what == "complaint" else SES_KINDS.get(str(report.get("bounceType")))
    )
    if kind is None:
        return f"SES bounce type {clean(report.get('bounceType'), 40)}"
    diagnostic = clean(recipient.get("diagnosticCode"), 1000)
    status = clean(recipient.get("status"), 32) or enhanced_status(diagnostic)
    if what == "complaint":
        status = clean(report.get("complaintFeedbackType"), 32) or "abuse"
    event_id = clean(report.get("feedbackId"), 200) or clean(message.get("MessageId"), 200)
    raw = {"sns_message_id": message.get("MessageId"), "recipient": recipient, what: report, "mail": mail}
    return WebhookEvent(
        source="ses",
        recipient=address,
        kind=kind,
        event_id=event_id,
        raw=json.dumps(raw, sort_keys=True).encode("utf-8", "replace"),
        message_id=_message_id(mail),
        status=status,
        diagnostic=diagnostic,
        smtp_code=smtp_code((diagnostic or "").removeprefix("smtp;").strip()),
    )
