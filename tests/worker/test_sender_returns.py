"""What a sender's settings put on the wire: its own bounce domain in the return path, and the tag its
relay's event webhooks hand back (Postmark metadata, SendGrid unique_args), outside the DKIM signature."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import aiohttp
import dkim as dkimpy
import psycopg

from tests.fixtures_smtp import SinkFactory
from tests.tracking.webhook_helpers import (
    POSTMARK_BOUNCE,
    dumps,
    postmark_auth,
    state,
    webhook_settings,
    webhook_tracker,
)
from tests.worker.helpers import enqueue_many, run_until_drained
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.dkim import dns_record, normalise_private_key
from worker.core.return_path import bounce_key, parse_return_path, recipient_hash
from worker.devtools.sink import ReceivedMessage
from worker.ops.senders import SenderSpec, add_sender, set_sender_status


async def _deliver(
    db_url: str,
    settings: Settings,
    sinks: SinkFactory,
    name: str,
    *,
    dkim_key: bytes | None = None,
    to: int = 0,
    **spec: Any,
) -> tuple[int, ReceivedMessage]:
    """Send one email through a new sender account `name` alone (the others paused); its id and the wire message."""
    sink = sinks()
    dkim = {"dkim_domain": "example.org", "dkim_selector": "mail2026"} if dkim_key else {}
    with psycopg.connect(db_url) as conn:
        for (other,) in conn.execute("SELECT name FROM mailroom.sender_accounts WHERE status = 'active'"):
            set_sender_status(conn, other, "paused")
        account = SenderSpec(
            name, "news@example.org", "127.0.0.1", sink.port, smtp_security="none", **dkim, **spec
        )
        add_sender(conn, account, None, SecretBox(settings.secret_key or ""), dkim_key)
    (email_id,) = enqueue_many(db_url, 1, start=to)
    assert await run_until_drained(db_url, settings) == 1
    (received,) = sink.handler.messages
    return email_id, received


async def test_the_return_path_is_on_the_senders_own_bounce_domain_else_the_global_one_else_its_address(
    db_url: str, settings: Settings, smtp_sink_factory: SinkFactory
) -> None:
    key = bounce_key(settings)
    everywhere = replace(settings, bounce_domain="bounces.global.example")
    own_id, own = await _deliver(
        db_url, everywhere, smtp_sink_factory, "own", bounce_domain="Returns.Example.COM"
    )
    global_id, shared = await _deliver(db_url, everywhere, smtp_sink_factory, "shared", to=1)
    _, plain = await _deliver(db_url, settings, smtp_sink_factory, "plain", to=2)
    assert own.mail_from.endswith("@returns.example.com")
    assert parse_return_path(own.mail_from, key) == (own_id, recipient_hash("u0@example.com", key))
    assert shared.mail_from.endswith("@bounces.global.example")
    assert parse_return_path(shared.mail_from, key) == (global_id, recipient_hash("u1@example.com", key))
    assert plain.mail_from == "news@example.org"
    assert own.message["From"] == shared.message["From"] == plain.message["From"]  # headers unchanged


def _verifies(message: bytes, pem: bytes) -> bool:
    record = dns_record(normalise_private_key(pem)).encode("ascii")

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name == b"mail2026._domainkey.example.org." else None

    return bool(dkimpy.verify(message, dnsfunc=lookup))


async def test_each_relay_gets_its_own_tag_outside_the_dkim_signature_and_others_none(
    db_url: str, settings: Settings, smtp_sink_factory: SinkFactory, pem: bytes
) -> None:
    pm_id, postmark = await _deliver(
        db_url, settings, smtp_sink_factory, "pm", dkim_key=pem, relay_provider="postmark"
    )
    sg_id, sendgrid = await _deliver(
        db_url, settings, smtp_sink_factory, "sg", dkim_key=pem, relay_provider="sendgrid", to=1
    )
    _, untagged = await _deliver(db_url, settings, smtp_sink_factory, "plain", dkim_key=pem, to=2)
    assert postmark.message.get_all("X-PM-Metadata-mailroom_email_id") == [str(pm_id)]
    assert postmark.message["X-SMTPAPI"] is None
    assert sendgrid.message.get_all("X-SMTPAPI") == [f'{{"unique_args":{{"mailroom_email_id":"{sg_id}"}}}}']
    assert json.loads(sendgrid.message["X-SMTPAPI"]) == {"unique_args": {"mailroom_email_id": str(sg_id)}}
    assert sendgrid.message["X-PM-Metadata-mailroom_email_id"] is None
    assert (
        untagged.message["X-SMTPAPI"] is None and untagged.message["X-PM-Metadata-mailroom_email_id"] is None
    )
    for received in (postmark, sendgrid, untagged):
        assert _verifies(received.content, pem)
        signed = str(received.message["DKIM-Signature"]).lower()
        assert "x-pm-metadata" not in signed and "x-smtpapi" not in signed
    # the relays strip their tags before delivery: the signature still holds without them
    stripped = b"\r\n".join(
        line for line in postmark.content.split(b"\r\n") if not line.startswith(b"X-PM-Metadata")
    )
    assert _verifies(stripped, pem)


async def test_a_postmark_bounce_webhook_names_the_email_by_the_tag_it_carried(
    db_url: str, settings: Settings, smtp_sink_factory: SinkFactory
) -> None:
    email_id, received = await _deliver(db_url, settings, smtp_sink_factory, "pm", relay_provider="postmark")
    tag = received.message["X-PM-Metadata-mailroom_email_id"]
    payload = copy.deepcopy(POSTMARK_BOUNCE)
    payload["Email"] = received.rcpt_tos[0]
    payload["Metadata"] = {"mailroom_email_id": tag}  # what Postmark hands back from the header
    url_path, body = "/webhooks/postmark", dumps(payload)
    async with (
        webhook_tracker(db_url, webhook_settings(settings)) as server,
        aiohttp.ClientSession() as http,
        http.post(server.make_url(url_path), data=body, headers=postmark_auth()) as resp,
    ):
        assert resp.status == 202
    after = state(db_url, email_id)
    assert after["status"] == "bounced"
    assert after["events"] == [(email_id, "u0@example.com", "hard", "postmark")]
