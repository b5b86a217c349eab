"""Tracking decided at enqueue: tokens, pixel, rewritten links with stored destinations, List-Unsubscribe."""

from __future__ import annotations

import re
from dataclasses import replace

import psycopg
import pytest

from tests.tracking import CAMPAIGN_HTML, email_row, enqueue_one, https, scalar
from worker.core.config import Settings
from worker.core.copy_rows import insert_batch
from worker.core.outbox import EmailRequest, prepare

CLICK = re.compile(r'href="http://localhost:8025/c/([0-9a-f-]{36})"')


def test_campaign_email_gets_pixel_click_links_and_unsubscribe_headers(
    db_url: str, settings: Settings
) -> None:
    email_id = enqueue_one(db_url, settings)
    row = email_row(db_url, email_id)
    assert row["transactional"] is False
    assert row["track_opens"] is True and row["track_clicks"] is True
    token, unsubscribe = row["tracking_token"], row["unsubscribe_token"]
    assert token is not None and unsubscribe is not None and token != unsubscribe
    html = row["html_body"]
    assert f'src="http://localhost:8025/o/{token}.gif"' in html
    assert html.index("/o/") < html.index("</body>")
    with psycopg.connect(db_url) as conn:
        links = conn.execute(
            "SELECT token::text, position, url FROM mailroom.tracked_links WHERE email_id = %s ORDER BY position",
            (email_id,),
        ).fetchall()
    assert [(p, u) for _, p, u in links] == [
        (0, "https://shop.example.com/sale?a=1&b=2"),
        (1, "http://example.org/blog"),
    ]
    assert CLICK.findall(html) == [t for t, _, _ in links]
    # Only http(s) anchors change; the rest stay exactly as written.
    for kept in (
        'href="javascript:alert(1)"',
        'href="mailto:help@example.com"',
        'href="/relative"',
        'href="#top"',
    ):
        assert kept in html
    assert "shop.example.com" not in html
    # A plain-http base URL (this development setup): a link, but no RFC 8058 one-click promise.
    assert row["headers"] == {"List-Unsubscribe": f"<http://localhost:8025/u/{unsubscribe}>"}


def test_one_click_post_header_only_with_an_https_unsubscribe_url(db_url: str, settings: Settings) -> None:
    # RFC 8058 §3.1: List-Unsubscribe-Post goes with a List-Unsubscribe that holds an HTTPS URI.
    secure = email_row(db_url, enqueue_one(db_url, https(settings), to="a@example.com"))
    assert secure["headers"] == {
        "List-Unsubscribe": f"<https://t.example.org/u/{secure['unsubscribe_token']}>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
    }
    with_mailto = replace(settings, unsubscribe_mailto="unsubscribe@example.org")
    plain = email_row(db_url, enqueue_one(db_url, with_mailto, to="b@example.com"))
    assert plain["headers"]["List-Unsubscribe"].startswith("<http://localhost:8025/u/")
    assert "List-Unsubscribe-Post" not in plain["headers"]


def test_transactional_email_is_neither_tracked_nor_unsubscribable(db_url: str, settings: Settings) -> None:
    email_id = enqueue_one(db_url, settings, campaign_id=None)
    row = email_row(db_url, email_id)
    assert row["transactional"] is True
    assert (row["tracking_token"], row["unsubscribe_token"], row["track_opens"], row["track_clicks"]) == (
        None,
        None,
        False,
        False,
    )
    assert row["html_body"] == CAMPAIGN_HTML
    assert row["headers"] == {}
    assert scalar(db_url, "SELECT count(*) FROM mailroom.tracked_links") == 0


def test_per_email_choice_overrides_the_campaign_default(db_url: str, settings: Settings) -> None:
    untracked = email_row(db_url, enqueue_one(db_url, settings, track=False))
    assert untracked["html_body"] == CAMPAIGN_HTML and untracked["tracking_token"] is None
    assert "List-Unsubscribe" in untracked["headers"]  # still bulk mail: still unsubscribable
    tracked = email_row(
        db_url, enqueue_one(db_url, settings, campaign_id=None, track=True, to="b@example.com")
    )
    assert tracked["track_opens"] is True and tracked["unsubscribe_token"] is None
    off = replace(settings, track_campaigns=False, unsubscribe_mailto="unsubscribe@example.org")
    quiet = email_row(db_url, enqueue_one(db_url, off, to="c@example.com"))
    assert quiet["tracking_token"] is None
    token = quiet["unsubscribe_token"]
    assert quiet["headers"]["List-Unsubscribe"] == (
        f"<http://localhost:8025/u/{token}>, <mailto:unsubscribe@example.org?subject=unsubscribe%20{token}>"
    )


def test_text_only_campaign_email_gets_no_open_tracking(db_url: str, settings: Settings) -> None:
    row = email_row(db_url, enqueue_one(db_url, settings, html=None))
    assert row["track_opens"] is False and row["tracking_token"] is None
    assert row["text_body"] == "Hello"


def test_bulk_copy_stores_links_and_drops_those_of_a_repeated_key(db_url: str, settings: Settings) -> None:
    request = EmailRequest(
        to="x@example.com", subject="s", html=CAMPAIGN_HTML, campaign_id="bulk", idempotency_key="k1"
    )
    plain = EmailRequest(to="y@example.com", subject="s", text="t")
    with psycopg.connect(db_url) as conn:
        first = insert_batch(conn, [prepare(request, None, settings), prepare(plain, None, settings)])
        again = insert_batch(conn, [prepare(request, None, settings)])
    assert again == first[:1]
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT email_id, count(*) FROM mailroom.tracked_links GROUP BY email_id"
        ).fetchall()
        tokens = [
            str(t) for (t,) in conn.execute("SELECT token FROM mailroom.tracked_links ORDER BY position")
        ]
    assert rows == [(first[0], 2)]
    assert CLICK.findall(email_row(db_url, first[0])["html_body"]) == tokens


UNSAFE_SETTINGS = [
    {"base_url": 'https://t.example.com/"><script>'},
    {"base_url": "https://t.example.com\r\nBcc: victim@example.com"},
    {"base_url": "javascript:alert(1)"},
    {"unsubscribe_mailto": "u@example.com>\r\nBcc: victim@example.com"},
    {"unsubscribe_mailto": "not an address"},
]


def test_unsafe_tracking_settings_are_refused_and_nothing_is_stored(db_url: str, settings: Settings) -> None:
    from worker.core.config import ConfigError

    for changes in UNSAFE_SETTINGS:
        with pytest.raises(ConfigError, match="MAILROOM_"):
            enqueue_one(db_url, replace(settings, **changes))  # type: ignore[arg-type]
    assert scalar(db_url, "SELECT count(*) FROM mailroom.email_queue") == 0
