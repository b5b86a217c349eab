"""What tracking and compliance add to an email as it is enqueued: tokens, open pixel, click links, List-Unsubscribe.

Everything here is decided once, at enqueue time, and stored with the email: the HTML that is
sent is the HTML that is stored, and every rewritten link's destination is a `tracked_links` row,
so the tracker only ever redirects to a URL written by the application that enqueued the email.
"""

from __future__ import annotations

import functools
import html as html_lib
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from html.entities import html5 as _ENTITIES
from urllib.parse import urljoin, urlsplit

from yarl import URL

from worker.core.config import ConfigError, Settings

# URL paths served by `worker.tracking.server`; the token is the only variable part.
OPEN_PATH = "/o/{token}.gif"
CLICK_PATH = "/c/{token}"
UNSUBSCRIBE_PATH = "/u/{token}"

ONE_CLICK = "List-Unsubscribe=One-Click"
MAX_LINK_CHARS = 4096

# Anchor and base start tags are read attribute by attribute, left to right, as the HTML tokenizer
# does, so that a quoted value may hold `>` or text that looks like an attribute (`title="see
# href=..."`) and an unquoted value runs to white space or `>`. Names and unquoted values are
# possessive (`++`) and the scan never goes back over text it has read, so malformed or hostile
# markup costs linear time. Only anchors are rewritten (not images, stylesheets or forms): a click
# is someone following a link; `<base href>` is what relative links resolve against.
_TAG_START = re.compile(r"<(a|base)(?=[\s/>])", re.IGNORECASE)
_NAME = r"[^\s\"'>/=]++"
_SEPARATOR = r"""(?:[\s/]+|(?<=["']))"""  # HTML lets an attribute follow a quoted value directly
_ATTRIBUTE = re.compile(rf"""{_SEPARATOR}({_NAME})(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]++)))?""")
_TAG_END = re.compile(r"[\s/]*>")
# Character references as the HTML tokenizer decodes them inside an attribute value.
_CHAR_REF = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|([A-Za-z][A-Za-z0-9]*)(;?))")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_BODY_END = re.compile(r"</body\s*>", re.IGNORECASE)
# Browsers drop tab and newline anywhere in a URL; anything else below 0x21 makes it unusable here.
_URL_NOISE = re.compile(r"[\t\n\r]")
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")
# What lands in headers and HTML attributes from configuration: nothing that could end either.
_BASE_URL = re.compile(r"^https?://[A-Za-z0-9.-]+(?::\d{1,5})?(?:/[A-Za-z0-9._~!$&()*+,;=:@%/-]*)?$")
_MAILTO = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+$")


def check_settings(settings: Settings) -> None:
    """Refuse a base URL or unsubscribe mailbox that would not survive inside a header or an attribute."""
    _check_settings(settings.base_url, settings.unsubscribe_mailto)


@functools.lru_cache(maxsize=8)
def _check_settings(base_url: str, unsubscribe_mailto: str | None) -> None:
    # Cached: this runs for every campaign email of a bulk load, and only errors are not cached.
    if not _BASE_URL.match(base_url):
        raise ConfigError(
            f"MAILROOM_BASE_URL must be an http(s) URL like https://t.example.com, got {base_url!r}"
        )
    if unsubscribe_mailto is not None and not _MAILTO.match(unsubscribe_mailto):
        raise ConfigError(
            "MAILROOM_UNSUBSCRIBE_MAILTO must be a plain address like unsubscribe@example.com, "
            f"got {unsubscribe_mailto!r}"
        )


@dataclass(frozen=True)
class Tracking:
    """What an email carries and stores for tracking and unsubscribe."""

    html: str | None
    headers: dict[str, str]
    tracking_token: uuid.UUID | None
    unsubscribe_token: uuid.UUID | None
    track_opens: bool
    track_clicks: bool
    links: tuple[tuple[uuid.UUID, str], ...]  # (link token, destination) in position order


def wants_tracking(
    track: bool | None, transactional: bool, campaign_id: str | None, settings: Settings
) -> bool:
    """Tracking is the email's own choice when it makes one, else on for campaign email (if enabled), else off."""
    if track is not None:
        return track
    return not transactional and campaign_id is not None and settings.track_campaigns


def attribute_value(raw: str) -> str:
    """An attribute value as the HTML tokenizer reads it: character references decoded.

    Unlike `html.unescape`, a named reference without its `;` is left alone when what follows it
    is `=` or a letter or digit (HTML's rule for attributes), so `?a=1&region=eu` stays as written
    instead of becoming `?a=1®ion=eu`.
    """
    if "&" not in raw:
        return raw

    def decode(match: re.Match[str]) -> str:
        name, semicolon = match.group(1), match.group(2)
        text = match.group(0)
        if name is None:  # numeric
            return html_lib.unescape(text)
        if semicolon:
            return _ENTITIES.get(name + ";", text)
        following = match.string[match.end() : match.end() + 1]
        if name in _ENTITIES and following != "=":  # a legacy name, e.g. `&amp`
            return _ENTITIES[name]
        return text

    return _CHAR_REF.sub(decode, raw)


def trackable_url(raw: str, base: str | None = None) -> str | None:
    """The destination of an href as a browser would follow it, if it is an absolute http(s) URL; else None.

    `raw` is the attribute as written (character references not yet decoded); a relative one
    resolves against `base` (the document's `<base href>`) when there is one.
    """
    url = _URL_NOISE.sub("", attribute_value(raw)).strip()
    if base is not None and url and not url.startswith("#") and not _SCHEME.match(url):
        url = urljoin(base, url)
    # A backslash is a slash to browsers but not to every URL parser: `https://evil\@good` must
    # never mean two hosts, so such a link stays as written (untracked).
    if not url or len(url) > MAX_LINK_CHARS or _URL_FORBIDDEN.search(url) or "\\" in url:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port out of range
        URL(url)  # what the tracker's redirect is built with: it must accept the destination
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or not parts.hostname:
        return None
    # urlsplit also accepts `http:host`; the database (and every browser) wants the `//` form.
    if not url.lower().startswith(("http://", "https://")):
        return None
    return url


@dataclass(frozen=True)
class _Tag:
    name: str  # "a" or "base", lower-cased
    start: int
    end: int
    attributes: dict[str, re.Match[str]]  # by lower-cased name; the first of a name wins, as in HTML


def _tags(html: str) -> Iterator[_Tag]:
    """Every complete `<a>` and `<base>` start tag, in document order."""
    at = 0
    while (found := _TAG_START.search(html, at)) is not None:
        attributes: dict[str, re.Match[str]] = {}
        at = found.end()
        while (attribute := _ATTRIBUTE.match(html, at)) is not None:
            attributes.setdefault(attribute.group(1).lower(), attribute)
            at = attribute.end()
        end = _TAG_END.match(html, at)
        if end is not None:  # else not a tag we can read: the scan goes on from where it stopped
            at = end.end()
            yield _Tag(found.group(1).lower(), found.start(), at, attributes)


def _href(tag: _Tag) -> re.Match[str] | None:
    """The tag's href attribute when it has a value."""
    href = tag.attributes.get("href")
    return href if href is not None and (href.lastindex or 0) >= 2 else None


def rewrite_links(html: str, base_url: str) -> tuple[str, tuple[tuple[uuid.UUID, str], ...]]:
    """Point every http(s) anchor at the tracker; return the new HTML and (token, destination) per link.

    Relative links resolve against the document's first `<base href>` when it is an http(s) URL.
    """
    tags = list(_tags(html))
    base = None
    for tag in tags:
        if tag.name == "base" and (href := _href(tag)) is not None:
            base = trackable_url(href.group(href.lastindex or 0))
            break
    links: list[tuple[uuid.UUID, str]] = []
    out: list[str] = []
    done = 0
    for tag in tags:
        href = _href(tag) if tag.name == "a" else None
        if href is None:
            continue
        value = href.lastindex or 0  # the group that matched: 2 double-quoted, 3 single-quoted, 4 bare
        url = trackable_url(href.group(value), base)
        if url is None:
            continue
        token = uuid.uuid4()
        links.append((token, url))
        quoted = 1 if value < 4 else 0
        out += (html[done : href.start(value) - quoted], f'"{base_url}{CLICK_PATH.format(token=token)}"')
        done = href.end(value) + quoted
    out.append(html[done:])
    return "".join(out), tuple(links)


def add_pixel(html: str, base_url: str, token: uuid.UUID) -> str:
    """Insert the 1x1 open pixel just before `</body>`, or at the end when there is none."""
    pixel = (
        f'<img src="{base_url}{OPEN_PATH.format(token=token)}" width="1" height="1" alt=""'
        ' style="display:block;width:1px;height:1px;border:0" />'
    )
    ends = list(_BODY_END.finditer(html))
    if not ends:
        return html + pixel
    at = ends[-1].start()
    return html[:at] + pixel + html[at:]


def unsubscribe_headers(token: uuid.UUID, settings: Settings) -> dict[str, str]:
    """RFC 2369 `List-Unsubscribe` (the tracker's URL, and mailto when configured) and RFC 8058 `List-Unsubscribe-Post`.

    RFC 8058 §3.1: `List-Unsubscribe-Post` is only for a `List-Unsubscribe` that carries an HTTPS
    URI, so with a plain-http base URL (a development setup) it is left out and receivers fall back
    to showing the link.
    """
    targets = [f"<{settings.base_url}{UNSUBSCRIBE_PATH.format(token=token)}>"]
    if settings.unsubscribe_mailto:
        targets.append(f"<mailto:{settings.unsubscribe_mailto}?subject=unsubscribe%20{token}>")
    headers = {"List-Unsubscribe": ", ".join(targets)}
    if settings.base_url.lower().startswith("https://"):
        headers["List-Unsubscribe-Post"] = ONE_CLICK
    return headers


def apply(
    html: str | None,
    headers: Mapping[str, str],
    *,
    track: bool,
    transactional: bool,
    settings: Settings,
    opens: bool = True,
) -> Tracking:
    """Decide an email's tracking: links when `track`, the pixel too unless `opens` is off (the
    campaign's choice), unsubscribe headers when not transactional."""
    check_settings(settings)
    out_headers = dict(headers)
    unsubscribe_token = None
    if not transactional:
        unsubscribe_token = uuid.uuid4()
        out_headers.update(unsubscribe_headers(unsubscribe_token, settings))
    tracking_token = None
    links: tuple[tuple[uuid.UUID, str], ...] = ()
    tracked_html = html is not None and bool(html.strip()) and track
    if tracked_html:
        assert html is not None
        tracking_token = uuid.uuid4()
        html, links = rewrite_links(html, settings.base_url)
        if opens:
            html = add_pixel(html, settings.base_url, tracking_token)
    return Tracking(
        html=html,
        headers=out_headers,
        tracking_token=tracking_token,
        unsubscribe_token=unsubscribe_token,
        track_opens=tracked_html and opens,
        track_clicks=bool(links),
        links=links,
    )
