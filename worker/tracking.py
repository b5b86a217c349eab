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
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from worker.config import ConfigError, Settings

# URL paths served by `worker.tracker`; the token is the only variable part.
OPEN_PATH = "/o/{token}.gif"
CLICK_PATH = "/c/{token}"
UNSUBSCRIBE_PATH = "/u/{token}"

ONE_CLICK = "List-Unsubscribe=One-Click"
MAX_LINK_CHARS = 4096

# `<a ... href=VALUE`: VALUE double-quoted, single-quoted or bare. Only anchors are rewritten
# (not images, stylesheets or forms): a click is someone following a link.
_ANCHOR_HREF = re.compile(
    r"""(<a\b[^>]*?\shref\s*=\s*)(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""", re.IGNORECASE
)
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


def trackable_url(raw: str) -> str | None:
    """The destination of an href as a browser would follow it, if it is an absolute http(s) URL; else None."""
    url = _URL_NOISE.sub("", html_lib.unescape(raw)).strip()
    if not url or len(url) > MAX_LINK_CHARS or _URL_FORBIDDEN.search(url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or not parts.hostname:
        return None
    # urlsplit also accepts `http:\\host`; the database (and every browser) wants the `//` form.
    if not url.lower().startswith(("http://", "https://")):
        return None
    return url


def rewrite_links(html: str, base_url: str) -> tuple[str, tuple[tuple[uuid.UUID, str], ...]]:
    """Point every http(s) anchor at the tracker; return the new HTML and (token, destination) per link."""
    links: list[tuple[uuid.UUID, str]] = []

    def replace(match: re.Match[str]) -> str:
        raw = next(g for g in match.groups()[1:] if g is not None)
        url = trackable_url(raw)
        if url is None:
            return match.group(0)
        token = uuid.uuid4()
        links.append((token, url))
        return f'{match.group(1)}"{base_url}{CLICK_PATH.format(token=token)}"'

    return _ANCHOR_HREF.sub(replace, html), tuple(links)


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
    """RFC 2369 `List-Unsubscribe` (HTTPS, and mailto when configured) and RFC 8058 `List-Unsubscribe-Post`."""
    targets = [f"<{settings.base_url}{UNSUBSCRIBE_PATH.format(token=token)}>"]
    if settings.unsubscribe_mailto:
        targets.append(f"<mailto:{settings.unsubscribe_mailto}?subject=unsubscribe%20{token}>")
    return {"List-Unsubscribe": ", ".join(targets), "List-Unsubscribe-Post": ONE_CLICK}


def apply(
    html: str | None,
    headers: Mapping[str, str],
    *,
    track: bool,
    transactional: bool,
    settings: Settings,
) -> Tracking:
    """Decide an email's tracking: pixel and links when `track`, unsubscribe headers when not transactional."""
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
        html = add_pixel(html, settings.base_url, tracking_token)
    return Tracking(
        html=html,
        headers=out_headers,
        tracking_token=tracking_token,
        unsubscribe_token=unsubscribe_token,
        track_opens=tracked_html,
        track_clicks=bool(links),
        links=links,
    )
