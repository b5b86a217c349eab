"""End to end: a real worker sends a campaign email to the aiosmtpd sink, the reader opens, clicks and
unsubscribes through the tracker, and the next campaign email is suppressed at claim time."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import psycopg
import pytest

from tests.tracking import enqueue_one, https, running_tracker
from tests.worker.helpers import add_sender, run_until_drained, statuses
from worker.cli.main import main
from worker.core.config import Settings
from worker.devtools.sink import RunningSink


async def test_unsubscribe_through_the_tracker_stops_the_next_campaign_email(
    db_url: str,
    settings: Settings,
    smtp_sink: RunningSink,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05, lease_seconds=2.0)
    add_sender(db_url, smtp_sink.port, settings=settings)
    enqueue_one(db_url, https(settings))
    assert await run_until_drained(db_url, fast) == 1
    [first] = smtp_sink.messages
    assert first.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    unsubscribe = re.fullmatch(
        r"<(https://t.example.org/u/[0-9a-f-]{36})>", str(first.message["List-Unsubscribe"])
    )
    assert unsubscribe is not None
    html = first.message.get_body(("html",)).get_content()
    pixel = re.search(r'src="(https://t.example.org/o/[0-9a-f-]{36}\.gif)"', html)
    link = re.search(r'href="(https://t.example.org/c/[0-9a-f-]{36})"', html)
    assert pixel is not None and link is not None

    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        for url in (pixel.group(1), link.group(1)):
            resp = await http.get(server.make_url(urlsplit(url).path), allow_redirects=False)
            assert resp.status in (200, 302)
        resp = await http.post(
            server.make_url(urlsplit(unsubscribe.group(1)).path), data={"List-Unsubscribe": "One-Click"}
        )
        assert resp.status == 200

    enqueue_one(db_url, settings)  # the next campaign email to the same reader
    enqueue_one(db_url, settings, campaign_id=None, subject="Your receipt")  # transactional still goes
    assert await run_until_drained(db_url, fast) == 1
    assert [m.message["Subject"] for m in smtp_sink.messages] == ["News", "Your receipt"]
    assert statuses(db_url) == {"sent": 2, "suppressed": 1}
    with psycopg.connect(db_url) as conn:
        reason = conn.execute(
            "SELECT suppression_reason FROM mailroom.email_queue WHERE status = 'suppressed'"
        ).fetchone()
    assert reason == ("unsubscribed",)

    assert main(["campaigns", "stats", "spring", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert {
        k: stats[k] for k in ("emails", "sent", "failed", "bounced", "suppressed", "opened", "clicked")
    } == {
        "emails": 2,
        "sent": 1,
        "failed": 0,
        "bounced": 0,
        "suppressed": 1,
        "opened": 1,
        "clicked": 1,
    }
    assert stats["unsubscribed"] == 1
    assert stats["rates"] == {
        "failed": 0.0,
        "bounced": 0.0,
        "opened": 1.0,
        "clicked": 1.0,
        "complained": 0.0,
        "unsubscribed": 1.0,
    }


async def test_unsubscribe_link_of_an_email_retention_deleted_still_works(
    db_url: str, settings: Settings, smtp_sink: RunningSink, tmp_path: Path
) -> None:
    from worker.ops.retention import run_maintenance
    from worker.tracking.campaigns import campaign_stats

    fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05, lease_seconds=2.0)
    add_sender(db_url, smtp_sink.port, settings=settings)
    email_id = enqueue_one(db_url, https(settings))
    assert await run_until_drained(db_url, fast) == 1
    unsubscribe = re.fullmatch(
        r"<https://t.example.org(/u/[0-9a-f-]{36})>", smtp_sink.messages[0].message["List-Unsubscribe"]
    )
    assert unsubscribe is not None

    # 100 days later maintenance archives the sent email and deletes it from the queue.
    kept = replace(settings, archive_dir=tmp_path / "archive")
    with psycopg.connect(db_url, autocommit=True) as conn:
        sent_at = conn.execute(
            "SELECT sent_at FROM mailroom.email_queue WHERE id = %s", (email_id,)
        ).fetchone()
        assert sent_at is not None
        report = run_maintenance(conn, kept, now=sent_at[0] + timedelta(days=100))
        assert {s.name: s.rows for s in report.steps}["archive_sent"] == 1 and not report.errors
        assert conn.execute("SELECT count(*) FROM mailroom.email_queue").fetchone() == (0,)
        stats = campaign_stats(conn, "spring")
    assert (stats.emails, stats.sent) == (1, 1)  # still counted as sent

    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        async with http.get(server.make_url(unsubscribe.group(1))) as resp:
            assert resp.status == 200 and "Rea***@example.com" in await resp.text()
        async with http.post(
            server.make_url(unsubscribe.group(1)), data={"List-Unsubscribe": "One-Click"}
        ) as resp:
            assert resp.status == 200
    with psycopg.connect(db_url) as conn:
        listed = conn.execute(
            "SELECT email, source, campaign_id, email_id FROM mailroom.unsubscribe_list"
        ).fetchall()
    assert listed == [("reader@example.com", "one_click", "spring", email_id)]
