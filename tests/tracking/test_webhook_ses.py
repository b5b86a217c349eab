"""Amazon SES through SNS over real HTTP: a test PKI served by local "AWS" servers, messages as AWS documents them.

The attacker knows the webhook's URL and the topic ARN (both appear in SNS's own messages) and can
host files anywhere under amazonaws.com (an S3 bucket); these tests play that attacker.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.producers.bounces.corpus import FIXTURE_KEY, sent_email
from tests.tracking.sns_pki import FakeAws, Issued, Pki, authority, fake_aws, leaf
from tests.tracking.webhook_helpers import dumps, state
from worker.core.config import Settings
from worker.producers.bounces.events import event_sink
from worker.tracking.server import make_app
from worker.tracking.sns import SnsVerifier, canonical
from worker.tracking.webhooks import WEBHOOKS

TOPIC = "arn:aws:sns:us-west-2:123456789012:MyTopic"
SNS_HOST = "sns.us-west-2.amazonaws.com"
CERT_PATH = "/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"
CERT_URL = f"https://{SNS_HOST}{CERT_PATH}"
SUBSCRIBE_QUERY = f"/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=2336412f37"
SUBSCRIBE_URL = f"https://{SNS_HOST}{SUBSCRIBE_QUERY}"
BUCKET_CERT_URL = "https://attacker-bucket.s3.amazonaws.com/c.pem"


def _files(pki: Pki, **more: bytes) -> dict[str, bytes]:
    """What the local AWS serves: SNS's signing certificate alone (as AWS does) and its issuer by caIssuers."""
    issuer = pki.issuing.cert.public_bytes(serialization.Encoding.DER)
    return {CERT_PATH: pki.signing.pem(), "/issuer.der": issuer, **{f"/{k}": v for k, v in more.items()}}


def _signed(
    key: rsa.RSAPrivateKey, message: dict[str, Any], version: str = "1", cert_url: str = CERT_URL
) -> dict[str, Any]:
    message = {**message, "SignatureVersion": version, "SigningCertURL": cert_url}
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
async def _tracker(
    db_url: str, settings: Settings, aws: FakeAws, pki: Pki, topics: tuple[str, ...] = (TOPIC,)
) -> AsyncIterator[TestServer]:
    """The tracker, its SNS verifier fetching from the local AWS and trusting the test root only."""
    sink = event_sink(FIXTURE_KEY)  # the key `sent_email` made the Message-IDs with
    app = make_app(db_url, replace(settings, ses_topic_arns=topics), pool_size=2, bounce_sink=sink)
    assert aws.fetcher is not None
    app[WEBHOOKS] = replace(app[WEBHOOKS], sns=SnsVerifier(aws.fetcher, roots=[pki.root.cert]))
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


def _hosts(aws: FakeAws) -> list[str]:
    """Every host name the tracker looked up (so asked to fetch from)."""
    assert aws.fetcher is not None and aws.fetcher.resolver is not None
    return list(getattr(aws.fetcher.resolver, "hosts", []))


async def test_a_signed_subscription_is_confirmed_on_the_sns_host_and_nowhere_else(
    db_url: str, settings: Settings
) -> None:
    pki = Pki.make()
    attacker = leaf(["sns.amazonaws.com"], None)
    bucket = f"https://attacker-bucket.s3.amazonaws.com{SUBSCRIBE_QUERY}"
    # Signed as SNS signs, yet naming another host; then forged outright (certificate and URL on S3).
    elsewhere = _signed(pki.signing.key, {**_subscription(), "SubscribeURL": bucket})
    other_region = _signed(
        pki.signing.key, {**_subscription(), "SubscribeURL": SUBSCRIBE_URL.replace("us-west-2", "eu-west-1")}
    )
    other_action = _signed(
        pki.signing.key, {**_subscription(), "SubscribeURL": SUBSCRIBE_URL.replace("Confirm", "Delete")}
    )
    forged = _signed(attacker.key, {**_subscription(), "SubscribeURL": bucket}, cert_url=BUCKET_CERT_URL)
    async with (
        fake_aws(pki, _files(pki, **{"c.pem": attacker.pem()})) as aws,
        _tracker(db_url, settings, aws, pki) as server,
        aiohttp.ClientSession() as http,
    ):
        confirmed = await _post(http, server, _signed(pki.signing.key, _subscription()))
        crowded = _signed(pki.signing.key, {**_subscription(), "SubscribeURL": SUBSCRIBE_URL + "&a=1" * 9})
        refused = [await _post(http, server, m) for m in (elsewhere, other_region, other_action, crowded)]
        forgery = await _post(http, server, forged)
    assert confirmed == (200, {"confirmed": TOPIC})
    assert [status for status, _ in refused] == [400] * 4
    assert forgery[0] == 401
    # the certificate and its issuer once (kept), the SubscribeURL once; never S3 nor another region
    assert aws.requests == [
        SNS_HOST + CERT_PATH,
        "crt.test.amazontrust.com/issuer.der",
        SNS_HOST + SUBSCRIBE_QUERY,
    ]
    assert not any("s3" in host or "eu-west-1" in host for host in _hosts(aws))


async def test_ses_bounces_and_complaints_apply_once_with_either_signature_version_and_answer_alike(
    db_url: str, settings: Settings
) -> None:
    pki = Pki.make()
    key = pki.signing.key
    jane = sent_email(db_url, "jane@example.com")
    richard = sent_email(db_url, "richard@example.com")
    bounce = _signed(key, _notification(_bounce(jane["message_id"], "jane@example.com")), "1")
    complaint = _notification(_complaint(richard["message_id"], "richard@example.com"), "f1c2d3")
    complaint = _signed(key, {**complaint, "Subject": "Amazon SES Email Event Notification"}, "2")
    stranger = _signed(key, _notification(_complaint("<nobody@example.org>", "who@example.org"), "f9"), "2")
    async with (
        fake_aws(pki, _files(pki)) as aws,
        _tracker(db_url, settings, aws, pki) as server,
        aiohttp.ClientSession() as http,
    ):
        answers = [await _post(http, server, m) for m in (bounce, bounce, complaint, complaint, stranger)]
    # recorded, duplicate and unmatched look the same from outside
    assert answers == [(202, {"accepted": 1})] * 5
    assert state(db_url, jane["id"]) == {
        "status": "bounced",
        "listed": [("jane@example.com", "hard", 1), ("richard@example.com", "complaint", 1)],
        "events": [
            (jane["id"], "jane@example.com", "hard", "ses"),
            (richard["id"], "richard@example.com", "complaint", "ses"),
        ],
        "quarantined": 1,
    }
    assert aws.requests == [SNS_HOST + CERT_PATH, "crt.test.amazontrust.com/issuer.der"]


async def test_a_complaint_signed_with_a_certificate_in_an_s3_bucket_is_refused_without_any_fetch(
    db_url: str, settings: Settings
) -> None:
    pki = Pki.make()
    attacker = leaf(["sns.amazonaws.com"], None)
    victim = sent_email(db_url, "victim@example.com")
    forged = _signed(
        attacker.key,
        _notification(_complaint(victim["message_id"], "victim@example.com")),
        "2",
        BUCKET_CERT_URL,
    )
    before = state(db_url, victim["id"])
    async with (
        fake_aws(pki, _files(pki, **{"c.pem": attacker.pem()})) as aws,
        _tracker(db_url, settings, aws, pki) as server,
        aiohttp.ClientSession() as http,
    ):
        status, _ = await _post(http, server, forged)
    assert status == 401
    assert state(db_url, victim["id"]) == before
    assert aws.requests == [] and _hosts(aws) == []


def _impostors(pki: Pki) -> dict[str, Issued]:
    """Certificates an attacker might get served from the SNS host's path, none of them SNS's."""
    stranger_root = authority("Stranger Root CA")
    stranger_ca = authority("Stranger Issuing CA", stranger_root)
    return {
        "self-signed.pem": leaf(["sns.amazonaws.com"], None),
        "untrusted.pem": leaf(["sns.amazonaws.com"], stranger_ca),
        "wrong-subject.pem": leaf(["evil.example.com"], pki.issuing),
    }


async def test_certificates_that_do_not_chain_to_a_trusted_root_and_name_sns_are_refused(
    db_url: str, settings: Settings
) -> None:
    pki = Pki.make()
    impostors = _impostors(pki)
    stranger_chain = impostors["untrusted.pem"].pem()
    files = {name: cert.pem() + (pki.issuing.pem() if name == "wrong-subject.pem" else b"")
             for name, cert in impostors.items()}  # fmt: skip
    files["untrusted.pem"] = stranger_chain
    files["huge.pem"] = pki.signing.pem() + b"#" * (70 * 1024)
    victim = sent_email(db_url, "victim@example.com")
    good = _notification(_complaint(victim["message_id"], "victim@example.com"))
    forged = [_signed(cert.key, good, "2", f"https://{SNS_HOST}/{name}") for name, cert in impostors.items()]
    forged.append(_signed(pki.signing.key, good, "2", f"https://{SNS_HOST}/redirect.pem"))
    forged.append(_signed(pki.signing.key, good, "2", f"https://{SNS_HOST}/huge.pem"))
    before = state(db_url, victim["id"])
    async with (
        fake_aws(pki, _files(pki, **files)) as aws,
        _tracker(db_url, settings, aws, pki) as server,
        aiohttp.ClientSession() as http,
    ):
        statuses = [(await _post(http, server, m))[0] for m in forged]
    assert statuses == [401] * len(forged)
    assert state(db_url, victim["id"]) == before
    # the redirect was not followed: the good certificate it points at was never asked for
    assert SNS_HOST + CERT_PATH not in aws.requests


async def test_a_certificate_host_that_never_answers_is_given_up_on_in_bounded_time(
    db_url: str, settings: Settings
) -> None:
    pki = Pki.make()
    victim = sent_email(db_url, "victim@example.com")
    hanging = _signed(
        pki.signing.key,
        _notification(_complaint(victim["message_id"], "victim@example.com")),
        "2",
        f"https://{SNS_HOST}/hang.pem",
    )
    before = state(db_url, victim["id"])
    async with (
        fake_aws(pki, _files(pki), fetch_seconds=0.5) as aws,
        _tracker(db_url, settings, aws, pki) as server,
        aiohttp.ClientSession() as http,
    ):
        status, _ = await _post(http, server, hanging)
    assert status == 503  # SNS retries later; nothing was applied
    assert aws.requests == [f"{SNS_HOST}/hang.pem"]
    assert state(db_url, victim["id"]) == before


async def test_a_message_of_a_topic_not_allowed_is_refused_before_anything_is_fetched(
    db_url: str, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    pki = Pki.make()
    victim = sent_email(db_url, "victim@example.com")
    theirs = {**_notification(_complaint(victim["message_id"], "victim@example.com")),
              "TopicArn": "arn:aws:sns:us-west-2:999999999999:Theirs"}  # fmt: skip
    message = _signed(pki.signing.key, theirs)
    before = state(db_url, victim["id"])
    caplog.set_level(logging.INFO, logger="mailroom.tracker")
    async with (
        fake_aws(pki, _files(pki)) as aws,
        _tracker(db_url, settings, aws, pki) as server,
        aiohttp.ClientSession() as http,
    ):
        other_topic = await _post(http, server, message)
    async with _tracker(db_url, settings, aws, pki, topics=()) as server, aiohttp.ClientSession() as http:
        unconfigured = await _post(http, server, _signed(pki.signing.key, theirs | {"TopicArn": TOPIC}))
    assert (other_topic[0], unconfigured[0]) == (403, 404)
    assert aws.requests == [] and _hosts(aws) == []
    assert state(db_url, victim["id"]) == before
    assert "MAILROOM_SES_TOPIC_ARNS lists no topic" in caplog.text


async def test_forged_altered_or_stale_sns_messages_are_refused_and_change_nothing(
    db_url: str, settings: Settings
) -> None:
    pki = Pki.make()
    key = pki.signing.key
    stranger = leaf(
        ["sns.amazonaws.com"], pki.issuing
    ).key  # an SNS-looking key whose certificate is not served
    jane = sent_email(db_url, "jane@example.com")
    good = _notification(_bounce(jane["message_id"], "jane@example.com"))
    altered = _signed(key, good)
    altered["Message"] = altered["Message"].replace("Permanent", "Transient")
    stale = _signed(key, {**good, "Timestamp": "2016-01-27T14:59:38.237Z"})
    before = state(db_url, jane["id"])
    elsewhere = [
        "https://sns.example.com/cert.pem",
        CERT_URL.replace("https", "http"),
        "https://sns.amazonaws.com.evil.example/cert.pem",
        "https://sns.us-west-2.amazonaws.com.evil.example/cert.pem",
        f"https://user@{SNS_HOST}{CERT_PATH}",
        f"https://{SNS_HOST}:8443{CERT_PATH}",
        f"https://{SNS_HOST}\\@evil.example{CERT_PATH}",
        f"https://{SNS_HOST}/cert.txt",
        f"{CERT_URL}?x=1",
        "https://sns.cn-north-1.amazonaws.com/cert.pem",
        "https://attacker.sns.us-west-2.amazonaws.com/cert.pem",
        "https://sqs.us-west-2.amazonaws.com/cert.pem",
    ]
    refused = [
        _signed(stranger, good),
        altered,
        *[{**_signed(key, good), "SigningCertURL": url} for url in elsewhere],
        {**_signed(key, good), "SigningCertURL": 7},
        {**_signed(key, good), "SignatureVersion": "3"},
        {**_signed(key, good), "Signature": "%%%"},
        stale,
    ]
    async with (
        fake_aws(pki, _files(pki)) as aws,
        _tracker(db_url, settings, aws, pki) as server,
        aiohttp.ClientSession() as http,
    ):
        statuses = [(await _post(http, server, m))[0] for m in refused]
        malformed = [
            (await _post(http, server, b))[0] for b in (b"{", dumps([good]), dumps({"Type": "Gossip"}))
        ]
    assert statuses == [401] * len(refused)
    assert malformed == [400, 400, 400]
    assert state(db_url, jane["id"]) == before
    assert set(_hosts(aws)) <= {SNS_HOST, "crt.test.amazontrust.com"}


async def test_ses_notifications_that_are_not_bounces_are_ignored_without_error(
    db_url: str, settings: Settings
) -> None:
    pki = Pki.make()
    jane = sent_email(db_url, "jane@example.com")
    delivery = {"notificationType": "Delivery", "mail": _mail(jane["message_id"]), "delivery": {}}
    odd_bounce = copy.deepcopy(_bounce(jane["message_id"], "jane@example.com"))
    odd_bounce["bounce"]["bouncedRecipients"] = [7, {"emailAddress": None}]
    crowd = copy.deepcopy(_bounce(jane["message_id"], "jane@example.com"))
    crowd["bounce"]["bouncedRecipients"] *= 101
    messages = [
        _notification(delivery),
        _notification({"x": [1]}),
        _notification(odd_bounce),
        _notification(crowd),
    ]
    messages.append({**_notification({}), "Message": "not json"})
    messages.append({**_notification({}), "Message": "[" * 100_000 + "]" * 100_000})
    async with (
        fake_aws(pki, _files(pki)) as aws,
        _tracker(db_url, settings, aws, pki) as server,
        aiohttp.ClientSession() as http,
    ):
        answers = [await _post(http, server, _signed(pki.signing.key, m)) for m in messages]
    assert [s for s, _ in answers] == [202] * 6
    assert state(db_url, jane["id"])["status"] == "sent"
    assert state(db_url, jane["id"])["quarantined"] == 0
