"""`mailroom campaigns stats`: counts and rates from the queue, the event tables and the unsubscribe list."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.tracking import enqueue_one
from worker.cli.main import main
from worker.core.config import Settings
from worker.tracking.campaigns import campaign_stats, format_stats


def _finish(conn: psycopg.Connection[object], email_id: int, status: str, outcome: str | None = None) -> None:
    """Move one email through claim to a final status the way the worker's statements do."""
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 't', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        (email_id,),
    )
    conn.execute(
        "UPDATE mailroom.email_queue SET status = %s, last_error = 'x',"
        " error_details = jsonb_build_object('outcome', %s::text) WHERE id = %s",
        (status, outcome, email_id),
    )


def test_stats_count_outcomes_and_events_with_rates(db_url: str, settings: Settings) -> None:
    ids = [enqueue_one(db_url, settings, to=f"r{i}@example.com") for i in range(5)]
    enqueue_one(db_url, settings, to="other@example.com", campaign_id="autumn")
    with psycopg.connect(db_url) as conn:
        for email_id in ids[:3]:
            _finish(conn, email_id, "sent")
        _finish(conn, ids[3], "failed", "bounced")
        for email_id in (ids[0], ids[0], ids[1]):  # email 0 opened twice
            conn.execute(
                "INSERT INTO mailroom.open_events (email_id, campaign_id) VALUES (%s, 'spring')", (email_id,)
            )
        conn.execute(
            "INSERT INTO mailroom.click_events (email_id, link_token, url, campaign_id)"
            " VALUES (%s, gen_random_uuid(), 'https://a.example', 'spring')",
            (ids[0],),
        )
        conn.execute(
            "INSERT INTO mailroom.unsubscribe_list (email, source, campaign_id) VALUES ('r0@example.com', 'one_click', 'spring')"
        )
        stats = campaign_stats(conn, "spring")
    assert (stats.emails, stats.sent, stats.failed, stats.bounced, stats.queued) == (5, 3, 1, 1, 1)
    assert (stats.opened, stats.opens, stats.clicked, stats.clicks, stats.unsubscribed) == (2, 3, 1, 1, 1)
    assert stats.rates() == {
        "failed": 0.25,
        "bounced": 0.25,
        "opened": 2 / 3,
        "clicked": 1 / 3,
        "complained": 0.0,
        "unsubscribed": 1 / 3,
    }
    text = format_stats(stats)
    assert re.search(r"^opened\s+2\s+66\.7%\s+\(3 opens\)$", text, re.MULTILINE)
    assert re.search(r"^bounced\s+1\s+25\.0%  \(0 after sending\)$", text, re.MULTILINE)


def test_bounces_and_complaints_reported_after_sending_count_against_the_campaign(
    db_url: str, settings: Settings
) -> None:
    """A relay accepted four emails; a webhook later bounced one and reported a complaint about another.
    Before, a later bounce left `sent` and `bounced` short and complaints were not counted at all."""
    from worker.core.webhook_events import WebhookEvent
    from worker.producers.bounces.events import apply_events

    ids = [enqueue_one(db_url, settings, to=f"r{i}@example.com") for i in range(4)]
    with psycopg.connect(db_url) as conn:
        for email_id in ids:
            _finish(conn, email_id, "sent")
        conn.execute("UPDATE mailroom.email_queue SET sent_at = now() WHERE id = ANY(%s)", (ids,))
        events = [
            WebhookEvent("webhook", "r0@example.com", "hard", "e1", b"{}", email_id=ids[0], status="5.1.1"),
            WebhookEvent("webhook", "r1@example.com", "complaint", "e2", b"{}", email_id=ids[1]),
            # the same complaint delivered again counts once
            WebhookEvent("webhook", "r1@example.com", "complaint", "e2", b"{}", email_id=ids[1]),
        ]
        verdicts = [o.verdict for o in apply_events(conn, events)]
        stats = campaign_stats(conn, "spring")
    assert verdicts == ["recorded", "recorded", "duplicate"]
    assert (stats.sent, stats.bounced, stats.bounced_after_sending, stats.complained) == (4, 1, 1, 1)
    assert stats.rates()["bounced"] == 0.25 and stats.rates()["complained"] == 0.25
    assert re.search(r"^complained\s+1\s+25\.0%$", format_stats(stats), re.MULTILINE)


def test_cli_stats_of_an_unknown_campaign_is_an_error(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["campaigns", "stats", "nope"]) == 1
    assert "no email belongs to campaign 'nope'" in capsys.readouterr().err


def test_deleting_sent_email_keeps_its_unsubscribe_token_and_campaign_only(
    db_url: str, settings: Settings
) -> None:
    bulk = enqueue_one(db_url, settings, to="a@example.com")
    receipt = enqueue_one(
        db_url, settings, to="b@example.com", transactional=True
    )  # a campaign, but transactional
    queued = enqueue_one(db_url, settings, to="c@example.com")  # never sent
    with psycopg.connect(db_url) as conn:
        for email_id in (bulk, receipt):
            _finish(conn, email_id, "sent")
            conn.execute(
                "INSERT INTO mailroom.send_logs (email_id, recipient_email, campaign_id, attempt, outcome)"
                " SELECT id, recipient_email, campaign_id, 1, 'sent' FROM mailroom.email_queue WHERE id = %s",
                (email_id,),
            )
        # An email archived long ago whose send log has since been dropped: nothing to find it by.
        conn.execute(
            "INSERT INTO mailroom.archived_emails VALUES (999999, now() - interval '800 days', 'old', gen_random_uuid(), true, true)"
        )
        token = conn.execute(
            "SELECT unsubscribe_token FROM mailroom.email_queue WHERE id = %s", (bulk,)
        ).fetchone()
        conn.execute("DELETE FROM mailroom.email_queue WHERE id = ANY(%s)", ([bulk, receipt, queued],))
        kept = conn.execute(
            "SELECT email_id, campaign_id, unsubscribe_token FROM mailroom.archived_emails ORDER BY email_id"
        ).fetchall()
        stats = campaign_stats(conn, "spring")
    assert token is not None and token[0] is not None
    assert kept == [(bulk, "spring", token[0]), (receipt, "spring", None)]
    assert (stats.emails, stats.sent, stats.queued) == (2, 2, 0)


def test_open_and_click_rates_count_only_email_that_could_report_them(
    db_url: str, settings: Settings
) -> None:
    tracked = [enqueue_one(db_url, settings, to=f"t{i}@example.com") for i in range(2)]
    untracked = [enqueue_one(db_url, settings, to=f"u{i}@example.com", track=False) for i in range(2)]
    quiet = enqueue_one(db_url, settings, to="q@example.com", campaign_id="quiet", track=False)
    with psycopg.connect(db_url) as conn:
        for email_id in [*tracked, *untracked, quiet]:
            _finish(conn, email_id, "sent")
        conn.execute(
            "INSERT INTO mailroom.open_events (email_id, campaign_id) VALUES (%s, 'spring')", (tracked[0],)
        )
        spring, untracked_campaign = campaign_stats(conn, "spring"), campaign_stats(conn, "quiet")
    assert (spring.sent, spring.sent_with_pixel, spring.sent_with_links) == (4, 2, 2)
    # One open among the two emails that had a pixel: 50 %, not 25 % of everything sent.
    assert spring.rates()["opened"] == 0.5 and spring.rates()["clicked"] == 0.0
    # A campaign nobody tracked has no open rate, rather than 0 %.
    assert untracked_campaign.rates()["opened"] is None and untracked_campaign.rates()["clicked"] is None
    assert re.search(r"^opened\s+0\s+\(0 opens\)$", format_stats(untracked_campaign), re.MULTILINE)
