"""Postmark's and SendGrid's own webhooks over real HTTP, with payloads shaped as each documents them."""

from __future__ import annotations

import base64
import copy
import time
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.producers.bounces.corpus import sent_email
from tests.tracking.webhook_helpers import (
    POSTMARK_BOUNCE,
    POSTMARK_PASSWORD,
    dumps,
    postmark_auth,
    state,
    webhook_settings,
    webhook_tracker,
)
from worker.core.config import ConfigError, Settings
from worker.producers.bounces.events import apply_events
from worker.tracking.server import make_app

# Postmark's SpamComplaint webhook.
POSTMARK_COMPLAINT: dict[str, Any] = {
    **POSTMARK_BOUNCE,
    "RecordType": "SpamComplaint",
    "ID": 42,
    "Type": "SpamComplaint",
    "TypeCode": 100001,
    "Name": "Spam complaint",
    "Description": "",
    "Details": "Test spam complaint details",
    "CanActivate": False,
    "Content": "<Abuse report dump>",
}


async def _post(
    http: aiohttp.ClientSession, server: TestServer, path: str, body: bytes, headers: dict[str, str]
) -> Any:
    async with http.post(server.make_url(path), data=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


def _postmark(record: dict[str, Any], email: dict[str, Any], to: str) -> bytes:
    payload = copy.deepcopy(record)
    payload["Email"] = to
    payload["Metadata"]["mailroom_email_id"] = str(email["id"])
    return dumps(payload)


async def test_a_postmark_hard_bounce_bounces_the_email_once_and_a_complaint_suppresses(
    db_url: str, settings: Settings
) -> None:
    bounced = sent_email(db_url, "john@example.com")
    complained = sent_email(db_url, "jane@example.com")
    bounce = _postmark(POSTMARK_BOUNCE, bounced, "john@example.com")
    complaint = _postmark(POSTMARK_COMPLAINT, complained, "Jane@Example.com")
    delivery = dumps({"RecordType": "Delivery", "MessageID": "x", "Recipient": "john@example.com"})
    async with webhook_tracker(db_url, webhook_settings(settings)) as server, aiohttp.ClientSession() as http:
        first = await _post(http, server, "/webhooks/postmark", bounce, postmark_auth())
        again = await _post(http, server, "/webhooks/postmark", bounce, postmark_auth())
        spam = await _post(http, server, "/webhooks/postmark", complaint, postmark_auth())
        other = await _post(http, server, "/webhooks/postmark", delivery, postmark_auth())
    assert [first, again, spam, other] == [(202, {"accepted": 1})] * 4
    assert state(db_url, bounced["id"]) == {
        "status": "bounced",
        "listed": [("jane@example.com", "complaint", 1), ("john@example.com", "hard", 1)],
        "events": [
            (bounced["id"], "john@example.com", "hard", "postmark"),
            (complained["id"], "jane@example.com", "complaint", "postmark"),
        ],
        "quarantined": 0,
    }
    assert state(db_url, complained["id"])["status"] == "sent"


async def test_postmark_without_the_right_credentials_is_refused_and_changes_nothing(
    db_url: str, settings: Settings
) -> None:
    email = sent_email(db_url, "john@example.com")
    body = _postmark(POSTMARK_BOUNCE, email, "john@example.com")
    before = state(db_url, email["id"])
    wrong = [
        {},
        postmark_auth(password="guess"),
        postmark_auth(user="admin"),
        {"Authorization": "Basic !!!not-base64"},
        {"Authorization": "Bearer " + POSTMARK_PASSWORD},
    ]
    async with webhook_tracker(db_url, webhook_settings(settings)) as server, aiohttp.ClientSession() as http:
        answers = [await _post(http, server, "/webhooks/postmark", body, headers) for headers in wrong]
        malformed = [
            (await _post(http, server, "/webhooks/postmark", b, postmark_auth()))[0]
            for b in (b"{", dumps([POSTMARK_BOUNCE]), dumps({**POSTMARK_BOUNCE, "Email": None}))
        ]
    assert [status for status, _ in answers] == [401] * len(wrong)
    assert malformed == [400, 400, 400]
    assert state(db_url, email["id"]) == before


def _sendgrid_keys() -> tuple[ec.EllipticCurvePrivateKey, str]:
    """A P-256 key pair; the public half as SendGrid shows it (base64 of the DER SubjectPublicKeyInfo)."""
    private = ec.generate_private_key(ec.SECP256R1())
    der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, base64.b64encode(der).decode("ascii")


def _sendgrid_headers(
    private: ec.EllipticCurvePrivateKey, body: bytes, at: float | None = None
) -> dict[str, str]:
    timestamp = str(int(time.time() if at is None else at))
    signature = private.sign(timestamp.encode("ascii") + body, ec.ECDSA(hashes.SHA256()))
    return {
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode("ascii"),
        "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        "Content-Type": "application/json",
    }


def _sendgrid_batch(by_arg: dict[str, Any], by_smtp_id: dict[str, Any], deferred: dict[str, Any]) -> bytes:
    """A batch as SendGrid posts it (its documented event examples), about three sent emails."""
    common = {"timestamp": 1513299569, "category": "cat facts"}
    return dumps([
        {**common, "email": "gone@example.net", "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
         "event": "bounce", "sg_event_id": "6g4ZI7SA-xmRDv57GoPIPw==",
         "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0",
         "reason": "550 5.1.1 The email account that you tried to reach does not exist.",
         "status": "5.1.1", "type": "bounce", "mailroom_email_id": str(by_arg["id"])},
        {**common, "email": "angry@example.com", "smtp-id": by_smtp_id["message_id"], "event": "spamreport",
         "sg_event_id": "S8mVbNZ2fdsMFzy1pyr4Ag==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.1"},
        {**common, "email": "slow@example.org", "smtp-id": deferred["message_id"], "event": "deferred",
         "sg_event_id": "5Sp3b2xwtwpTRMaOMSWOUg==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.2",
         "response": "400 try again later", "attempt": "5"},
        {**common, "email": "gone@example.net", "event": "delivered", "sg_event_id": "rWVYmVk90MjZJ9iohOBa3w==",
         "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.3", "response": "250 OK"},
        {**common, "email": "gone@example.net", "event": "dropped", "reason": "Unsubscribed Address",
         "sg_event_id": "zmzJhfJgAfUSOW80yEbPyw==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.4",
         "status": "5.0.0"},
    ])  # fmt: skip


async def test_a_signed_sendgrid_batch_applies_bounces_complaints_and_deferrals_once(
    db_url: str, settings: Settings
) -> None:
    private, public = _sendgrid_keys()
    gone = sent_email(db_url, "gone@example.net")
    angry = sent_email(db_url, "angry@example.com")
    slow = sent_email(db_url, "slow@example.org")
    body = _sendgrid_batch(gone, angry, slow)
    hooks = webhook_settings(settings, sendgrid_key=public)
    async with webhook_tracker(db_url, hooks) as server, aiohttp.ClientSession() as http:
        first = await _post(http, server, "/webhooks/sendgrid", body, _sendgrid_headers(private, body))
        again = await _post(http, server, "/webhooks/sendgrid", body, _sendgrid_headers(private, body))
    assert first == again == (202, {"accepted": 5})
    assert state(db_url, gone["id"]) == {
        "status": "bounced",
        "listed": [
            ("angry@example.com", "complaint", 1),
            ("gone@example.net", "hard", 1),
            ("slow@example.org", "soft", 1),
        ],
        "events": [
            (gone["id"], "gone@example.net", "hard", "sendgrid"),
            (angry["id"], "angry@example.com", "complaint", "sendgrid"),
            (slow["id"], "slow@example.org", "soft", "sendgrid"),
        ],
        "quarantined": 0,
    }
    assert state(db_url, slow["id"])["status"] == "sent"


async def test_sendgrid_refuses_other_keys_altered_bodies_and_stale_timestamps(
    db_url: str, settings: Settings
) -> None:
    private, public = _sendgrid_keys()
    stranger, _ = _sendgrid_keys()
    gone = sent_email(db_url, "gone@example.net")
    body = _sendgrid_batch(gone, gone, gone)
    before = state(db_url, gone["id"])
    good = _sendgrid_headers(private, body)
    refused = [
        (body, _sendgrid_headers(stranger, body)),
        (body.replace(b"gone@", b"else@"), good),
        (body, _sendgrid_headers(private, body, at=time.time() - 600)),
        (body, {**good, "X-Twilio-Email-Event-Webhook-Timestamp": str(int(time.time()) + 1)}),
        (body, {**good, "X-Twilio-Email-Event-Webhook-Signature": "bm90IGEgc2lnbmF0dXJl"}),
        (body, {**good, "X-Twilio-Email-Event-Webhook-Signature": "***"}),
        (body, {"Content-Type": "application/json"}),
    ]
    malformed = [
        b"{",
        dumps({"event": "bounce"}),
        dumps([{"event": "delivered"}] * 10_001),  # more than SendGrid ever batches
        dumps([1, None, {"event": "bounce", "email": 7}]),
    ]
    hooks = webhook_settings(settings, sendgrid_key=public)
    async with webhook_tracker(db_url, hooks) as server, aiohttp.ClientSession() as http:
        answers = [(await _post(http, server, "/webhooks/sendgrid", b, h))[0] for b, h in refused]
        odd = [
            (await _post(http, server, "/webhooks/sendgrid", b, _sendgrid_headers(private, b)))[0]
            for b in malformed
        ]
    assert answers == [401] * len(refused)
    assert odd == [400, 400, 400, 202]
    assert state(db_url, gone["id"]) == before


def test_a_sendgrid_key_that_is_not_a_p256_public_key_stops_the_tracker_at_start(
    db_url: str, settings: Settings
) -> None:
    rsa_like = base64.b64encode(b"not a key").decode()
    p384 = (
        ec.generate_private_key(ec.SECP384R1())
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    for key in (rsa_like, "%%%", base64.b64encode(p384).decode()):
        with pytest.raises(ConfigError, match="SENDGRID"):
            make_app(db_url, replace(settings, sendgrid_webhook_public_key=key), bounce_sink=apply_events)
