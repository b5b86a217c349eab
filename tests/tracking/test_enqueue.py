"""Tracking decided at enqueue: tokens, pixel, rewritten links with stored destinations, List-Unsubscribe."""

from __future__ import annotations

import re
from dataclasses import replace

import psycopg
import pytest

from tests.tracking import CAMPAIGN_HTML, email_row, enqueue_one, https, scalar
from worker.core.config import Settings
from worker.core.copy_rows import insert_batch
from worker.core.json_lines import parse_line
from worker.core.links import rewrite_links, trackable_url
from worker.core.outbox import EmailRequest, prepare
from worker.core.validation import ValidationError

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


def test_json_line_track_field_must_be_boolean() -> None:
    assert parse_line('{"to": "a@example.com", "subject": "s", "text": "t", "track": true}').track is True
    with pytest.raises(ValidationError, match="track: must be true or false"):
        parse_line('{"to": "a@example.com", "subject": "s", "text": "t", "track": "yes"}')


@pytest.mark.parametrize(
    "href",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(1)",
        "java&#x09;script:alert(1)",
        "data:text/html,<script>",
        "//evil.example.com/x",
        "https:evil.example.com",
        "http:\\\\evil.example.com",
        "https://",
        "ftp://example.com/f",
        "vbscript:msgbox",
        "https://evil.example\\@good.example/",  # a browser goes to evil.example, urlsplit says good
        "https:\\\\evil.example/",
        "https://good.example:99999/",  # a port no redirect can carry
        "https://[::1/",
    ],
)
def test_only_absolute_http_destinations_are_trackable(href: str) -> None:
    assert trackable_url(href) is None
    html = f'<a href="{href}">x</a>'
    assert rewrite_links(html, "https://t.example")[0] == html


def test_entity_encoded_and_whitespace_wrapped_links_are_stored_as_followed() -> None:
    html, links = rewrite_links('<A HREF = " https://a.example/x?p=1&amp;q=2\n" >x</A>', "https://t.example")
    assert [u for _, u in links] == ["https://a.example/x?p=1&q=2"]
    assert html == f'<A HREF = "https://t.example/c/{links[0][0]}" >x</A>'


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


def _destinations(html: str) -> list[str]:
    return [url for _, url in rewrite_links(html, "https://t.example")[1]]


@pytest.mark.parametrize(
    ("href", "followed"),
    [
        # HTML attributes leave a named reference without `;` alone before `=` or a letter or digit.
        ("https://a.example/?a=1&region=eu&copy=2", "https://a.example/?a=1&region=eu&copy=2"),
        ("https://a.example/?a=1&amp;b=2&amp", "https://a.example/?a=1&b=2&"),
        ("https://a.example/?q=&lt;x&gt;&not=1&#65;&#x42;", "https://a.example/?q=<x>&not=1AB"),
        ("https://a.example/?a=1&ampx;b", "https://a.example/?a=1&ampx;b"),
    ],
)
def test_character_references_are_decoded_as_an_attribute_is(href: str, followed: str) -> None:
    assert _destinations(f'<a href="{href}">x</a>') == [followed]


def test_anchor_attributes_are_read_as_html_reads_them() -> None:
    html = (
        '<a title="see href=https://decoy.example/" href="https://one.example/">1</a>'
        '<a title="a > b" href=https://two.example/x?y=1&amp;z=2>2</a>'
        '<a href="https://three.example/"title="no space">3</a>'
        '<a href="https://four.example/" href="https://ignored.example/">4</a>'
        '<a data-href="https://not-a-link.example/">5</a>'
        "<a\n  class=\"button\"\n  HREF='https://six.example/'\n>6</a>"
        '<abbr href="https://not-an-anchor.example/">7</abbr>'
    )
    rewritten, links = rewrite_links(html, "https://t.example")
    assert [url for _, url in links] == [
        "https://one.example/",
        "https://two.example/x?y=1&z=2",
        "https://three.example/",
        "https://four.example/",
        "https://six.example/",
    ]
    click = [f'"https://t.example/c/{token}"' for token, _ in links]
    assert rewritten == (
        f'<a title="see href=https://decoy.example/" href={click[0]}>1</a>'
        f'<a title="a > b" href={click[1]}>2</a>'
        f'<a href={click[2]}title="no space">3</a>'
        f'<a href={click[3]} href="https://ignored.example/">4</a>'
        '<a data-href="https://not-a-link.example/">5</a>'
        f'<a\n  class="button"\n  HREF={click[4]}\n>6</a>'
        '<abbr href="https://not-an-anchor.example/">7</abbr>'
    )


def test_relative_links_resolve_against_the_base_href() -> None:
    html = (
        '<head><base target="_blank"><BASE href="https://shop.example/spring/"></head>'
        '<a href="sale?x=1">a</a> <a href="/about">b</a> <a href="//cdn.example/c">c</a> '
        '<a href="#top">d</a> <a href="javascript:alert(1)">e</a> <a href="mailto:x@example.com">f</a>'
    )
    assert _destinations(html) == [
        "https://shop.example/spring/sale?x=1",
        "https://shop.example/about",
        "https://cdn.example/c",
    ]
    # Without a usable base, relative links stay as written.
    assert _destinations('<base href="javascript:x"><a href="sale">a</a>') == []


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "html",
    [
        "<a " + 'x="a"' * 50_000,  # attributes without an end
        "<a href='" + "<a href=" * 30_000,  # a quote that never closes, with tags inside
        "<a x='" + '<a x="' * 30_000,
        '<a href="' * 30_000,
    ],
    ids=["attributes", "open-quote", "mixed-quotes", "repeated-open"],
)
def test_malformed_markup_is_read_in_linear_time(html: str) -> None:
    # These took minutes with a backtracking pattern; a linear scan reads them in milliseconds.
    assert rewrite_links(html, "https://t.example") == (html, ())
