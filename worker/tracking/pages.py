"""What the public server's pages share: the database pool's key, the caller as stored with an event, the
headers every answer sends.

The tracker (`worker.tracking.server`), the signing page (`worker.tracking.signing`) and the login
(`worker.tracking.oidc`) each import this module and never each other, so the server can add their
routes without an import circle (import-linter holds it: pyproject.toml).
"""

from __future__ import annotations

import contextlib
import html
import ipaddress
import re

from aiohttp import web

from worker.core.failover import Pool

# The public server's one pool, opened and closed by the server (`worker.tracking.server.make_app`).
POOL = web.AppKey("pool", Pool)

MAX_USER_AGENT = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

NO_CACHE = {
    "Cache-Control": "no-store, no-cache, must-revalidate, max-age=0, private",
    "Pragma": "no-cache",
    "Expires": "0",
}
COMMON = {"Referrer-Policy": "no-referrer", "X-Robots-Tag": "noindex, nofollow"}


def page_headers(style_src: str) -> dict[str, str]:
    """An HTML page's headers: its own style only (`style_src`: a nonce or inline), posting only back here,
    never framed (a framed confirmation button could be clicked by someone who did not mean to), never cached."""
    return {
        "Content-Security-Policy": f"default-src 'none'; style-src {style_src}; form-action 'self';"
        " frame-ancestors 'none'; base-uri 'none'",
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        **NO_CACHE,
        **COMMON,
    }


def clean(value: str | None, limit: int) -> str | None:
    """Header or form text fit to store: bounded, valid UTF-8, no control characters; None when empty.

    Header bytes that are not UTF-8 arrive as lone surrogates, which PostgreSQL text cannot hold: they
    become U+FFFD."""
    if not value:
        return None
    value = value[:limit]
    try:
        value = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate surrogateescape cannot map back to a byte
        value = value.encode("utf-8", "replace").decode("utf-8")
    return _CONTROL.sub("", value) or None


def client(request: web.Request) -> tuple[str | None, str | None]:
    """The caller's address and user agent, kept with each event so bots and prefetchers can be filtered."""
    ip: str | None = None
    with contextlib.suppress(ValueError):
        ip = str(ipaddress.ip_address(request.remote or ""))
    return ip, clean(request.headers.get("User-Agent"), MAX_USER_AGENT)


def page(title: str, body: str, status: int = 200) -> web.Response:
    """A small HTML page (the tracker's and the login's): the title escaped, `body` already HTML, no script,
    its own inline style only, never framed or cached."""
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title></head>"
        '<body style="font-family:sans-serif;max-width:36em;margin:3em auto;padding:0 1em">'
        f"<h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    return web.Response(
        text=text, status=status, content_type="text/html", headers=page_headers("'unsafe-inline'")
    )
