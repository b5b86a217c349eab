"""Amazon SES bounces and complaints through SNS: the message signature, the subscription, the SES payload.

SNS signs a canonical string of the message's fields with the private key of a certificate it
names by URL (SignatureVersion 1: SHA1withRSA, 2: SHA256withRSA). Anyone can post a message naming
any URL, so the topic is checked against the allow-list before anything is fetched, the URL must be
a `.pem` on the SNS host itself, and the certificate must chain to a trusted root and name SNS
(`worker.tracking.sns_trust`); certificates are then kept per URL. Any AWS account can sign messages
of its own topics, hence the allow-list. A subscription is confirmed by GETting its SubscribeURL,
only when it is on the SNS host of the topic's region and confirms that topic.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509 import verification

from worker.core.webhook_events import EventKind, WebhookEvent
from worker.tracking import sns_trust
from worker.tracking.providers import Mapped, PayloadError, clean, enhanced_status, smtp_code

log = logging.getLogger("mailroom.tracker")

# SNS retries an HTTP endpoint for up to an hour under the longest delivery policies.
MAX_AGE_SECONDS = 3600
# SES lists at most 50 recipients per message; more is not SES.
MAX_RECIPIENTS = 100
_SIGNED = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")
FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": _SIGNED,
    "UnsubscribeConfirmation": _SIGNED,
}
_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
SES_KINDS: dict[str, EventKind] = {"Permanent": "hard", "Transient": "soft", "Undetermined": "soft"}
# A network failure while fetching: SNS should retry later (a 503), unlike a refusal.
UNREACHABLE = (aiohttp.ClientError, OSError)


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
    """Checks SNS signatures against certificates from the SNS host that chain to a trusted root."""

    def __init__(
        self,
        fetch: sns_trust.Fetch | None = None,
        roots: Sequence[x509.Certificate] | None = None,
        cache_size: int = 32,
    ) -> None:
        self.fetch: sns_trust.Fetch = fetch or sns_trust.HttpFetcher()
        self._roots = list(roots) if roots is not None else None
        self._store: verification.Store | None = None
        self.cache_size = cache_size
        # per certificate URL: its key and the end of its validity (refusals are not kept: see _key)
        self._keys: OrderedDict[str, tuple[rsa.RSAPublicKey, datetime]] = OrderedDict()
        self._issuers: OrderedDict[str, list[x509.Certificate]] = OrderedDict()

    def store(self) -> verification.Store | None:
        """The trust store (the system's unless roots were given), or None when there are no roots."""
        if self._store is None:
            roots = self._roots if self._roots is not None else sns_trust.system_roots()
            self._store = verification.Store(roots) if roots else None
        return self._store

    async def refusal(self, message: dict[str, Any], now: float) -> str | None:
        """None when SNS signed this message; else why not. Fetching a certificate may raise (network)."""
        algorithm = _HASHES.get(str(message.get("SignatureVersion")))
        signed = canonical(message)
        if algorithm is None or signed is None:
            return "not a signed SNS message"
        url = sns_trust.certificate_url(message.get("SigningCertURL"))
        if url is None:
            return "signing certificate is not a .pem on an https SNS host"
        if not fresh(message, now):
            return "stale or missing Timestamp"
        try:
            signature = base64.b64decode(str(message.get("Signature")), validate=True)
        except (ValueError, binascii.Error):
            return "signature is not base64"
        key = await self._key(url, datetime.fromtimestamp(now, UTC))
        if key is None:
            return "signing certificate is not an SNS certificate from a trusted authority"
        try:
            key.verify(signature, signed, padding.PKCS1v15(), algorithm())
        except InvalidSignature:
            return "bad signature"
        return None

    async def confirm(self, message: dict[str, Any]) -> bool:
        """GET the SubscribeURL of a verified SubscriptionConfirmation when it is SNS's for its topic."""
        url = sns_trust.subscribe_url(message.get("SubscribeURL"), str(message.get("TopicArn")))
        if url is None:
            return False
        try:
            await self.fetch(str(url))
        except sns_trust.FetchRefused as exc:
            log.warning("SNS refused the subscription confirmation: %s", exc)
            return False
        return True

    async def _key(self, url: sns_trust.SnsUrl, at: datetime) -> rsa.RSAPublicKey | None:
        """The verified key of the certificate at `url` (a network failure raises and is not kept)."""
        cached = self._keys.get(str(url))
        if cached is not None and at <= cached[1]:
            self._keys.move_to_end(str(url))
            return cached[0]
        store = self.store()
        if store is None:
            log.error("no trusted root certificates: every SNS message is refused")
            return None
        try:
            chain = sns_trust.load_certificates(await self.fetch(str(url)))
        except (ValueError, sns_trust.FetchRefused):
            return None
        leaf, intermediates = chain[0], chain[1:]
        key = leaf.public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            return None
        if not sns_trust.chain_verified(store, leaf, intermediates, url.host, at):
            issuers = await self._fetched_issuers(leaf)
            if not issuers or not sns_trust.chain_verified(store, leaf, issuers, url.host, at):
                return None
        self._remember(self._keys, str(url), (key, leaf.not_valid_after_utc))
        return key

    async def _fetched_issuers(self, leaf: x509.Certificate) -> list[x509.Certificate]:
        """The leaf's issuer certificates from its caIssuers URLs on Amazon's trust hosts (AWS sends none)."""
        found: list[x509.Certificate] = []
        for url in sns_trust.issuer_urls(leaf):
            if url not in self._issuers:
                try:
                    self._remember(self._issuers, url, sns_trust.load_certificates(await self.fetch(url))[:4])
                except (ValueError, sns_trust.FetchRefused):
                    continue
            found.extend(self._issuers[url])
        return found

    def _remember(self, cache: OrderedDict[str, Any], url: str, value: Any) -> None:
        cache[url] = value
        if len(cache) > self.cache_size:
            cache.popitem(last=False)


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
    except (ValueError, RecursionError):
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
    if len(listed) > MAX_RECIPIENTS:
        return [f"SES {recipients} with over {MAX_RECIPIENTS} recipients"]
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
