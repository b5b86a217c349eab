"""Amazon SES through SNS over real HTTP: a certificate chain made by the test, messages shaped as AWS documents."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from tests.producers.bounces.corpus import sent_email
from tests.tracking.webhook_helpers import dumps, state
from worker.core.config import Settings
from worker.producers.bounces.events import apply_events
from worker.tracking.server import make_app
from worker.tracking.sns import SnsVerifier, canonical
from worker.tracking.webhooks import WEBHOOKS

TOPIC = "arn:aws:sns:us-west-2:123456789012:MyTopic"
CERT_URL = (
    "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"
)
SUBSCRIBE_URL = (
    "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription"
    "&TopicArn=arn:aws:sns:us-west-2:123456789012:MyTopic&Token=2336412f37"
)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _chain() -> tuple[rsa.RSAPrivateKey, bytes]:
    """A CA and the signing certificate it issued (as SNS's is); the leaf's key and PEM of leaf then CA."""
    now = datetime.now(UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = (
        x509.CertificateBuilder().subject_name(_name("Test Root CA")).issuer_name(_name("Test Root CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    leaf = (
        x509.CertificateBuilder().subject_name(_name("sns.amazonaws.com")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pems = leaf.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
    return key, pems


class FakeAws:
    """What the tracker GETs from AWS: the signing certificate, subscription confirmations."""

    def __init__(self, pem: bytes) -> None:
        self.pem = pem
        self.gets: list[str] = []

    async def get(self, url: str) -> bytes:
        """Answer as AWS would, and remember the request."""
        self.gets.append(url)
        return self.pem if url.endswith(".pem") else b"<ConfirmSubscriptionResponse/>"


def _signed(key: rsa.RSAPrivateKey, message: dict[str, Any], version: str = "1") -> dict[str, Any]:
    message = {**message, "SignatureVersion": version, "SigningCertURL": CERT_URL}
    text = canonical(message)
    assert text is not None
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()  # noqa: S303 -- SNS version 1 is SHA1withRSA
    message["Signature"] = base64.b64encode(key.sign(text, padding.PKCS1v15(), algorithm)).decode()
    return message


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _subscription() -> dict[str, Any]:
    return {
        "Type": "SubscriptionConfirmation",
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": "2336412f37",
        "TopicArn": TOPIC,
        "Message": f"You have chosen to subscribe to the topic {TOPIC}.\n"
        "To confirm the subscription, visit the SubscribeURL included in this message.",
        "SubscribeURL": SUBSCRIBE_URL,
        "Timestamp": _now(),
    }


def _mail(message_id: str) -> dict[str, Any]:
    """SES's `mail` object, as its documented examples show it, for one of Mailroom's emails."""
    return {
        "timestamp": "2016-01-27T14:59:38.237Z",
        "source": "john@example.com",
        "sourceArn": "arn:aws:ses:us-east-1:888888888888:identity/example.com",
        "sourceIp": "127.0.3.0",
        "sendingAccountId": "123456789012",
        "messageId": "00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa0680-000000",
        "destination": ["jane@example.com"],
        "headersTruncated": False,
        "headers": [{"name": "From", "value": '"John Doe" <john@example.com>'},
                    {"name": "Message-ID", "value": message_id}, {"name": "Subject", "value": "Hello"}],
        "commonHeaders": {"from": ["John Doe <john@example.com>"], "to": ["Jane Doe <jane@example.com>"],
                          "messageId": message_id, "subject": "Hello"},
    }  # fmt: skip


def _bounce(message_id: str, to: str) -> dict[str, Any]:
    return {
        "notificationType": "Bounce",
        "bounce": {
            "bounceType": "Permanent",
            "reportingMTA": "dns; email.example.com",
            "bouncedRecipients": [{"emailAddress": to, "status": "5.1.1", "action": "failed",
                                   "diagnosticCode": "smtp; 550 5.1.1 <jane@example.com>... User"}],
            "bounceSubType": "General",
            "timestamp": "2016-01-27T14:59:38.237Z",
            "feedbackId": "00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa068a-000000",
            "remoteMtaIp": "127.0.2.0",
        },
        "mail": _mail(message_id),
    }  # fmt: skip


def _complaint(message_id: str, to: str) -> dict[str, Any]:
    return {
        "notificationType": "Complaint",
        "complaint": {
            "userAgent": "AnyCompany Feedback Loop (V0.01)",
            "complainedRecipients": [{"emailAddress": to}],
            "complaintFeedbackType": "abuse",
            "arrivalDate": "2016-01-27T14:59:38.237Z",
            "timestamp": "2016-01-27T14:59:38.237Z",
            "feedbackId": "000001378603177f-18c07c78-fa81-4a58-9dd1-fedc3cb8f49a-000000",
        },
        "mail": _mail(message_id),
    }


def _notification(
    ses: dict[str, Any], message_id: str = "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324"
) -> dict[str, Any]:
    return {
        "Type": "Notification",
        "MessageId": message_id,
        "TopicArn": TOPIC,
        "Message": json.dumps(ses),
        "Timestamp": _now(),
        "UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=" + TOPIC,
    }


@asynccontextmanager
async def _tracker(db_url: str, settings: Settings, aws: FakeAws) -> AsyncIterator[TestServer]:
    app = make_app(db_url, replace(settings, ses_topic_arns=(TOPIC,)), pool_size=2, bounce_sink=apply_events)
    app[WEBHOOKS] = replace(app[WEBHOOKS], sns=SnsVerifier(aws.get))
    server = TestServer(app)
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


async def _post(http: aiohttp.ClientSession, server: TestServer, message: Any) -> Any:
    body = message if isinstance(message, bytes) else dumps(message)
    headers = {"x-amz-sns-message-type": str(message.get("Type")) if isinstance(message, dict) else ""}
    async with http.post(server.make_url("/webhooks/ses"), data=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_a_signed_subscription_is_confirmed_on_aws_and_nowhere_else(
    db_url: str, settings: Settings
) -> None:
    key, pem = _chain()
    aws = FakeAws(pem)
    elsewhere = _signed(key, {**_subscription(), "SubscribeURL": "https://evil.example.com/?amazonaws.com"})
    async with _tracker(db_url, settings, aws) as server, aiohttp.ClientSession() as http:
        confirmed = await _post(http, server, _signed(key, _subscription()))
        refused = await _post(http, server, elsewhere)
    assert confirmed == (200, {"confirmed": TOPIC})
    assert refused[0] == 400
    assert aws.gets == [CERT_URL, SUBSCRIBE_URL]  # the certificate once (cached), never evil.example.com


async def test_ses_bounces_and_complaints_apply_once_with_either_signature_version(
    db_url: str, settings: Settings
) -> None:
    key, pem = _chain()
    aws = FakeAws(pem)
    jane = sent_email(db_url, "jane@example.com")
    richard = sent_email(db_url, "richard@example.com")
    bounce = _signed(key, _notification(_bounce(jane["message_id"], "jane@example.com")), "1")
    complaint = _notification(_complaint(richard["message_id"], "richard@example.com"), "f1c2d3")
    complaint = _signed(key, {**complaint, "Subject": "Amazon SES Email Event Notification"}, "2")
    async with _tracker(db_url, settings, aws) as server, aiohttp.ClientSession() as http:
        answers = [await _post(http, server, m) for m in (bounce, bounce, complaint, complaint)]
    assert [(s, a["events"][0]["verdict"]) for s, a in answers] == [
        (202, "recorded"), (202, "duplicate"), (202, "recorded"), (202, "duplicate"),
    ]  # fmt: skip
    assert state(db_url, jane["id"]) == {
        "status": "bounced",
        "listed": [("jane@example.com", "hard", 1), ("richard@example.com", "complaint", 1)],
        "events": [
            (jane["id"], "jane@example.com", "hard", "ses"),
            (richard["id"], "richard@example.com", "complaint", "ses"),
        ],
        "quarantined": 0,
    }
    assert aws.gets == [CERT_URL]


async def test_forged_foreign_or_stale_sns_messages_are_refused_and_change_nothing(
    db_url: str, settings: Settings
) -> None:
    key, pem = _chain()
    stranger, _ = _chain()
    aws = FakeAws(pem)
    jane = sent_email(db_url, "jane@example.com")
    good = _notification(_bounce(jane["message_id"], "jane@example.com"))
    altered = _signed(key, good)
    altered["Message"] = altered["Message"].replace("Permanent", "Transient")
    stale = _signed(key, {**good, "Timestamp": "2016-01-27T14:59:38.237Z"})
    before = state(db_url, jane["id"])
    refused = [
        _signed(stranger, good),
        altered,
        {**_signed(key, good), "SigningCertURL": "https://sns.example.com/cert.pem"},
        {**_signed(key, good), "SigningCertURL": CERT_URL.replace("https", "http")},
        {**_signed(key, good), "SigningCertURL": "https://sns.amazonaws.com.evil.example/cert.pem"},
        {**_signed(key, good), "SignatureVersion": "3"},
        {**_signed(key, good), "Signature": "%%%"},
        stale,
    ]
    foreign = _signed(key, {**good, "TopicArn": "arn:aws:sns:us-west-2:999999999999:Theirs"})
    async with _tracker(db_url, settings, aws) as server, aiohttp.ClientSession() as http:
        statuses = [(await _post(http, server, m))[0] for m in refused]
        other_topic = (await _post(http, server, foreign))[0]
        malformed = [
            (await _post(http, server, b))[0] for b in (b"{", dumps([good]), dumps({"Type": "Gossip"}))
        ]
    assert statuses == [401] * len(refused)
    assert other_topic == 403
    assert malformed == [400, 400, 400]
    assert state(db_url, jane["id"]) == before
    assert set(aws.gets) <= {CERT_URL}


async def test_ses_notifications_that_are_not_bounces_are_ignored_without_error(
    db_url: str, settings: Settings
) -> None:
    key, pem = _chain()
    jane = sent_email(db_url, "jane@example.com")
    delivery = {"notificationType": "Delivery", "mail": _mail(jane["message_id"]), "delivery": {}}
    odd_bounce = copy.deepcopy(_bounce(jane["message_id"], "jane@example.com"))
    odd_bounce["bounce"]["bouncedRecipients"] = [7, {"emailAddress": None}]
    messages = [_notification(delivery), _notification({"x": [1]}), _notification(odd_bounce)]
    messages.append({**_notification({}), "Message": "not json"})
    async with _tracker(db_url, settings, FakeAws(pem)) as server, aiohttp.ClientSession() as http:
        answers = [await _post(http, server, _signed(key, m)) for m in messages]
    assert [s for s, _ in answers] == [202] * 4
    assert all(e["verdict"] == "ignored" for _, a in answers for e in a["events"])
    assert state(db_url, jane["id"])["status"] == "sent"
