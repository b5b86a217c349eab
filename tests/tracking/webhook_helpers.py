"""Helpers for the webhook tests: a tracker serving the webhooks, and what the database says after."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import psycopg
from aiohttp.test_utils import TestServer

from tests.producers.bounces.corpus import FIXTURE_KEY
from worker.core.config import Settings
from worker.producers.bounces.events import event_sink
from worker.tracking.server import make_app
from worker.tracking.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, generic_signature

SECRET = "test-webhook-secret-0123456789"
POSTMARK_USER = "postmark-hook"
POSTMARK_PASSWORD = "pm-password-ä-9876"


def webhook_settings(settings: Settings, sendgrid_key: str | None = None) -> Settings:
    """The test's settings with every webhook secret configured."""
    return replace(
        settings,
        webhook_secret=SECRET,
        postmark_webhook_user=POSTMARK_USER,
        postmark_webhook_password=POSTMARK_PASSWORD,
        sendgrid_webhook_public_key=sendgrid_key,
    )


@asynccontextmanager
async def webhook_tracker(db_url: str, settings: Settings) -> AsyncIterator[TestServer]:
    """The tracker, with the bounce producers applying its webhooks, on a real local port.

    Message-IDs are authenticated with the key `sent_email` made them with."""
    server = TestServer(make_app(db_url, settings, pool_size=2, bounce_sink=event_sink(FIXTURE_KEY)))
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


def signed_headers(body: bytes, *, at: float | None = None, secret: str = SECRET) -> dict[str, str]:
    """Headers of a generic webhook request signed as a sender of `body` at time `at` (now)."""
    timestamp = str(int(time.time() if at is None else at))
    return {
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: generic_signature(secret, timestamp, body),
        "Content-Type": "application/json",
    }


def dumps(payload: Any) -> bytes:
    """A JSON request body."""
    return json.dumps(payload).encode("utf-8")


def state(db_url: str, email_id: int) -> dict[str, Any]:
    """The email's status, the bounce list, the bounce events and the quarantine, as the tests compare them."""
    with psycopg.connect(db_url) as conn:
        status = conn.execute("SELECT status FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
        listed = conn.execute(
            "SELECT email, bounce_type, bounce_count FROM mailroom.bounce_list ORDER BY email"
        ).fetchall()
        events = conn.execute(
            "SELECT email_id, recipient, kind, source FROM mailroom.bounce_events ORDER BY id"
        ).fetchall()
        quarantined = conn.execute("SELECT count(*) FROM mailroom.bounce_quarantine").fetchone()
    return {
        "status": status[0] if status else None,
        "listed": [tuple(r) for r in listed],
        "events": [tuple(r) for r in events],
        "quarantined": quarantined[0] if quarantined else 0,
    }


# Postmark's Bounce webhook, as its documentation's example shows it.
POSTMARK_BOUNCE: dict[str, Any] = {
    "RecordType": "Bounce",
    "MessageStream": "outbound",
    "ID": 4323372036854775807,
    "Type": "HardBounce",
    "TypeCode": 1,
    "Name": "Hard bounce",
    "Tag": "Test",
    "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
    "Metadata": {"a_key": "a_value", "b_key": "b_value"},
    "ServerID": 23,
    "Description": "The server was unable to deliver your message (ex: unknown user, mailbox not found).",
    "Details": "smtp;550 5.1.1 The email account that you tried to reach does not exist.",
    "Email": "john@example.com",
    "From": "sender@example.com",
    "BouncedAt": "2019-11-05T16:33:54.9070259Z",
    "DumpAvailable": True,
    "Inactive": True,
    "CanActivate": True,
    "Subject": "Test subject",
    "Content": "<Full dump of bounce>",
}


def postmark_auth(user: str = POSTMARK_USER, password: str = POSTMARK_PASSWORD) -> dict[str, str]:
    """Postmark's Basic credentials header (the right ones unless told otherwise)."""
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return {"Authorization": f"Basic {credentials}", "Content-Type": "application/json"}
