"""Which links of an HTML body are tracked: absolute http(s) destinations only, read as a browser reads the attribute, in linear time."""

from __future__ import annotations

import pytest

from worker.core.json_lines import parse_line
from worker.core.links import rewrite_links, trackable_url
from worker.core.validation import ValidationError


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
