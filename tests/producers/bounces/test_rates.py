"""From a relay's 250 to a later bounce and complaint: the email ends `bounced`, the address is suppressed,
and the sender's and the campaign's rates count both (stats --json, campaigns stats, bounces list)."""

from __future__ import annotations

import json
from dataclasses import replace

import psycopg
import pytest

from tests.producers.bounces.corpus import load, readdress
from tests.worker.helpers import add_sender, enqueue_many, run_until_drained
from worker.cli.main import main
from worker.core.config import Settings
from worker.core.return_path import bounce_key, parse_return_path
from worker.core.webhook_events import WebhookEvent
from worker.devtools.sink import RunningSink
from worker.producers.bounces import ingest
from worker.producers.bounces.events import apply_events


async def test_later_bounces_and_complaints_count_against_the_sender_and_the_campaign(
    db_url: str,
    settings: Settings,
    smtp_sink: RunningSink,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = replace(
        settings, bounce_domain="bounces.example.org", retry_base_seconds=0.01, lease_seconds=2.0
    )
    add_sender(db_url, smtp_sink.port, settings=settings)
    ids = enqueue_many(db_url, 4, campaign_id="spring")
    assert await run_until_drained(db_url, settings) == 4
    key = bounce_key(settings)
    # every message left with its own return path, which names its email
    paths = {m.rcpt_tos[0]: m.mail_from for m in smtp_sink.messages}
    assert parse_return_path(paths["u0@example.com"], key) is not None
    raw = readdress(load("postfix-unknown-user.eml"), ids[0], "u0@example.com", key).replace(
        b"no-such-user@mta.example.net", b"u0@example.com"
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert ingest(conn, raw, key).verdict == "recorded"
    with psycopg.connect(db_url) as conn:
        event = WebhookEvent("webhook", "u1@example.com", "complaint", "fbl-1", b"{}", email_id=ids[1])
        assert [o.verdict for o in apply_events(conn, [event])] == ["recorded"]

    assert main(["stats", "--json"]) == 0
    [sender] = json.loads(capsys.readouterr().out)["senders"]
    assert (sender["deliveries"], sender["hard_bounces"], sender["complaints"]) == (4, 1, 1)
    assert (sender["hard_bounce_rate"], sender["complaint_rate"]) == (0.25, 0.25)
    assert main(["stats"]) == 0
    assert "of its last 4 deliveries 25.0% bounced hard, 25.00% drew complaints" in capsys.readouterr().out

    assert main(["campaigns", "stats", "spring", "--json"]) == 0
    campaign = json.loads(capsys.readouterr().out)
    assert (campaign["sent"], campaign["bounced"], campaign["complained"]) == (4, 1, 1)
    assert campaign["rates"]["complained"] == 0.25

    assert main(["bounces", "list", "--kind", "complaint", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["recipient"], listed["sender"], listed["campaign"], listed["email_id"]) == (
        "u1@example.com",
        "primary",
        "spring",
        ids[1],
    )
    assert main(["bounces", "list"]) == 0
    out = capsys.readouterr().out
    assert "u0@example.com" in out and "hard" in out and "complaint" in out
    assert main(["bounces", "list", "--sender", "nobody"]) == 0
    assert capsys.readouterr().out.strip() == "no bounce or complaint recorded matches"

    # later email to either address is suppressed, never sent
    again = enqueue_many(db_url, 2)
    assert await run_until_drained(db_url, settings) == 0
    with psycopg.connect(db_url) as conn:
        states = conn.execute(
            "SELECT id, status FROM mailroom.email_queue WHERE id = ANY(%s) OR id = ANY(%s) ORDER BY id",
            (ids[:2], again),
        ).fetchall()
    assert [s for _, s in states] == ["bounced", "sent", "suppressed", "suppressed"]
