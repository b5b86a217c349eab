"""The generic bounce webhook over real HTTP against the real database: signed, fresh, applied once."""

from __future__ import annotations

import io
import time
from typing import Any

import aiohttp
import psycopg
from aiohttp.test_utils import TestServer

from tests.producers.bounces.corpus import sent_email
from tests.tracking.webhook_helpers import (
    SECRET,
    dumps,
    signed_headers,
    state,
    webhook_settings,
    webhook_tracker,
)
from worker.core.config import Settings
from worker.producers.bounces import COMPLAINTS_CHANNEL

PATH = "/webhooks/bounces"


async def _post(http: aiohttp.ClientSession, server: TestServer, body: bytes, headers: dict[str, str]) -> Any:
    async with http.post(server.make_url(PATH), data=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_a_signed_hard_bounce_bounces_the_email_and_lists_the_address_once_however_often_it_comes(
    db_url: str, settings: Settings
) -> None:
    email = sent_email(db_url, "gone@example.net")
    body = dumps(
        {"recipient": "Gone@Example.net", "type": "hard", "email_id": email["id"], "status": "5.1.1",
         "diagnostic": "550 5.1.1 no such user", "event_id": "evt-1"}
    )  # fmt: skip
    async with webhook_tracker(db_url, webhook_settings(settings)) as server, aiohttp.ClientSession() as http:
        first = await _post(http, server, body, signed_headers(body))
        # Redelivered later (signed again, as a sender retrying does): nothing changes a second time.
        again = await _post(http, server, body, signed_headers(body, at=time.time() + 1))
    assert first == again == (202, {"accepted": 1})
    assert state(db_url, email["id"]) == {
        "status": "bounced",
        "listed": [("gone@example.net", "hard", 1)],
        "events": [(email["id"], "gone@example.net", "hard", "webhook")],
        "quarantined": 0,
    }


async def test_a_complaint_named_by_message_id_suppresses_and_notifies_and_strangers_are_unmatched(
    db_url: str, settings: Settings
) -> None:
    email = sent_email(db_url, "reader@example.com")
    other = sent_email(db_url, "someone@example.com")
    body = dumps([
        {"recipient": "reader@example.com", "type": "complaint", "message_id": email["message_id"].strip("<>")},
        # an email Mailroom never sent, and an address the named email was not sent to
        {"recipient": "reader@example.com", "type": "hard", "email_id": 987654321},
        {"recipient": "victim@example.com", "type": "hard", "email_id": other["id"]},
    ])  # fmt: skip
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {COMPLAINTS_CHANNEL}")
        async with (
            webhook_tracker(db_url, webhook_settings(settings)) as server,
            aiohttp.ClientSession() as http,
        ):
            status, answer = await _post(http, server, body, signed_headers(body))
        notices = list(listener.notifies(timeout=5, stop_after=1))
    assert (status, answer) == (202, {"accepted": 3})
    assert len(notices) == 1 and f'"email_id": {email["id"]}' in notices[0].payload
    after = state(db_url, email["id"])
    assert after["status"] == "sent"
    assert after["listed"] == [("reader@example.com", "complaint", 1)]
    assert after["quarantined"] == 2
    assert state(db_url, other["id"])["status"] == "sent"


async def test_a_bad_or_missing_signature_is_refused_and_changes_nothing(
    db_url: str, settings: Settings
) -> None:
    email = sent_email(db_url, "gone@example.net")
    body = dumps({"recipient": "gone@example.net", "type": "hard", "email_id": email["id"]})
    before = state(db_url, email["id"])
    good = signed_headers(body)
    forged = [
        signed_headers(body, secret="not-the-secret"),
        {**good, "X-Mailroom-Signature": good["X-Mailroom-Signature"][:-2] + "00"},
        {k: v for k, v in good.items() if k != "X-Mailroom-Signature"},
        {**good, "X-Mailroom-Signature": "sha256=é"},
        # the signature of this body at another time does not cover a changed timestamp
        {**good, "X-Mailroom-Timestamp": str(int(good["X-Mailroom-Timestamp"]) + 1)},
    ]
    async with webhook_tracker(db_url, webhook_settings(settings)) as server, aiohttp.ClientSession() as http:
        answers = [await _post(http, server, body, headers) for headers in forged]
        altered = await _post(http, server, body.replace(b"hard", b"soft"), good)
    assert [status for status, _ in [*answers, altered]] == [401] * 6
    assert state(db_url, email["id"]) == before


async def test_a_stale_or_future_timestamp_is_refused_even_when_signed(
    db_url: str, settings: Settings
) -> None:
    email = sent_email(db_url, "gone@example.net")
    body = dumps({"recipient": "gone@example.net", "type": "hard", "email_id": email["id"]})
    before = state(db_url, email["id"])
    async with webhook_tracker(db_url, webhook_settings(settings)) as server, aiohttp.ClientSession() as http:
        stale = await _post(http, server, body, signed_headers(body, at=time.time() - 301))
        future = await _post(http, server, body, signed_headers(body, at=time.time() + 400))
        garbage = await _post(http, server, body, {**signed_headers(body), "X-Mailroom-Timestamp": "soon"})
    assert [stale[0], future[0], garbage[0]] == [401, 401, 401]
    assert state(db_url, email["id"]) == before


async def test_malformed_payloads_are_answered_400_or_quarantined_never_500(
    db_url: str, settings: Settings
) -> None:
    email = sent_email(db_url, "gone@example.net")
    before = state(db_url, email["id"])
    rejected = [
        b"not json",
        b"\xff\xfe",
        b"",
        b"[]",
        b"42",
        b"[" * 100_000 + b"]" * 100_000,
        dumps({"recipient": "gone@example.net", "type": "bounced", "email_id": email["id"]}),
        dumps({"recipient": "nobody", "type": "hard"}),
        dumps({"recipient": ["gone@example.net"], "type": "hard"}),
        dumps({"recipient": "gone@example.net", "type": "hard", "email_id": True}),
        dumps({"recipient": "gone@example.net", "type": "hard", "email_id": "1; DROP TABLE x"}),
        dumps({"recipient": "gone@example.net", "type": "hard", "status": {"a": 1}}),
        dumps([{"recipient": "gone@example.net", "type": "hard"}] * 1001),
    ]
    # Accepted but naming no email of Mailroom's: text PostgreSQL cannot hold, ids out of range.
    unmatched = [
        dumps({"recipient": "x\u0000@example.net", "type": "soft", "diagnostic": "\ud800\u0000", "email_id": 2**70}),
        dumps({"recipient": "gone@example.net", "type": "hard", "email_id": -1, "message_id": "<\u0000>"}),
        dumps({"recipient": "gone@example.net", "type": "hard", "message_id": f"<{2**80}.ff@example.org>"}),
    ]  # fmt: skip
    async with webhook_tracker(db_url, webhook_settings(settings)) as server, aiohttp.ClientSession() as http:
        bad = [(await _post(http, server, body, signed_headers(body)))[0] for body in rejected]
        odd = [await _post(http, server, body, signed_headers(body)) for body in unmatched]
        huge = b"[" + b" " * (2 * 1024 * 1024) + b"]"
        async with http.post(
            server.make_url(PATH), data=io.BytesIO(huge), headers=signed_headers(huge)
        ) as resp:
            too_large = resp.status
    assert bad == [400] * len(rejected)
    assert odd == [(202, {"accepted": 1})] * 3
    assert too_large == 413
    assert state(db_url, email["id"]) == {**before, "quarantined": 3}


async def test_the_answer_does_not_tell_whether_an_email_or_an_address_exists(
    db_url: str, settings: Settings
) -> None:
    email = sent_email(db_url, "known@example.net")
    probes = [
        {"recipient": "known@example.net", "type": "soft", "email_id": email["id"]},  # recorded
        {"recipient": "known@example.net", "type": "soft", "email_id": email["id"]},  # duplicate
        {"recipient": "other@example.net", "type": "soft", "email_id": email["id"]},  # not its recipient
        {"recipient": "known@example.net", "type": "soft", "email_id": email["id"] + 1000},  # no such email
        {"recipient": "known@example.net", "type": "soft", "message_id": email["message_id"]},
        {"recipient": "known@example.net", "type": "soft", "message_id": "<guess@example.org>"},
    ]
    async with webhook_tracker(db_url, webhook_settings(settings)) as server, aiohttp.ClientSession() as http:
        answers = []
        for n, probe in enumerate(probes):
            body = dumps({**probe, "event_id": f"probe-{n // 2 if n < 2 else n}"})
            answers.append(await _post(http, server, body, signed_headers(body)))
    assert answers == [(202, {"accepted": 1})] * len(probes)
    assert (email["id"], "known@example.net", "soft", "webhook") in state(db_url, email["id"])["events"]


async def test_a_webhook_without_its_secret_configured_is_not_there(db_url: str, settings: Settings) -> None:
    email = sent_email(db_url, "gone@example.net")
    body = dumps({"recipient": "gone@example.net", "type": "hard", "email_id": email["id"]})
    async with webhook_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        answer = await _post(http, server, body, signed_headers(body, secret=SECRET))
    assert answer[0] == 404
    assert state(db_url, email["id"])["status"] == "sent"


async def test_an_event_the_database_refuses_is_kept_and_the_rest_of_the_batch_applied(
    db_url: str, settings: Settings
) -> None:
    refused, fine = sent_email(db_url, "refused@example.net"), sent_email(db_url, "fine@example.net")
    with psycopg.connect(db_url) as conn:  # a rule of the database that refuses what one event says
        conn.execute(
            "CREATE FUNCTION refuse_event() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF NEW.recipient = 'refused@example.net' THEN"
            " RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON mailroom.bounce_events FOR EACH ROW EXECUTE FUNCTION refuse_event()"
        )
    body = dumps(
        [{"recipient": "refused@example.net", "type": "hard", "email_id": refused["id"], "event_id": "e1"},
         {"recipient": "fine@example.net", "type": "hard", "email_id": fine["id"], "event_id": "e2"}]
    )  # fmt: skip
    async with webhook_tracker(db_url, webhook_settings(settings)) as server, aiohttp.ClientSession() as http:
        assert await _post(http, server, body, signed_headers(body)) == (202, {"accepted": 2})
    assert state(db_url, fine["id"])["status"] == "bounced"
    with psycopg.connect(db_url) as conn:
        kept = conn.execute("SELECT reason, client FROM mailroom.bounce_quarantine").fetchall()
    assert kept == [("webhook webhook event refused by the database: CheckViolation", "webhook:webhook")]
