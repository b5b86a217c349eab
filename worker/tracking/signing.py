"""The signing page: GET /s/{token} shows a signer's document, POST /s/{token} signs it with their consent.

The token is a signer's link (`worker.producers.documents.signing_links`); the signatures domain
answers through a `SigningDesk` the command line hands over. GET changes nothing. POST needs the
ticked consent box and a CSRF token: an HMAC of the link's token and a random nonce kept in a
SameSite=Strict, HttpOnly cookie set by the GET, so another site can neither read nor forge it.
When a login is required (the document's `require_login`, or the installation's), the page offers
"Sign in to sign" (`worker.tracking.oidc`, imported only then) and a POST without the right login
signs nothing. Every answer is a page of its own state (signed, expired, superseded, not valid),
never telling whether some other address is a signer; each client has a rate budget, bodies are
small, and nothing from the request is shown unescaped.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from worker.core.config import Settings
from worker.core.return_path import b32_prefix, keyed_digest, optional_bounce_key
from worker.core.signing_desk import LinkState, LinkView, Proof, SigningDesk, SignOutcome
from worker.tracking.pages import COMMON, NO_CACHE, clean, client, page_headers
from worker.tracking.signing_pages import choose_locale, render, words

if TYPE_CHECKING:
    from worker.tracking import oidc

log = logging.getLogger("mailroom.signing")

DESK: web.AppKey[SigningDesk] = web.AppKey("signing_desk")
CSRF_KEY: web.AppKey[bytes] = web.AppKey("signing_csrf_key")
SECURE: web.AppKey[bool] = web.AppKey("signing_secure_cookie")
SETTINGS: web.AppKey[Settings] = web.AppKey("signing_settings")
COOKIE_PATH: web.AppKey[str] = web.AppKey("signing_cookie_path")

COOKIE = "mailroom_sign"
MAX_BODY = 8 * 1024
MAX_TOKEN = 64
MAX_REFERER = 2048
# Matched whole (fullmatch), never with `$`, which also matches before a final newline.
_NONCE = re.compile(r"[A-Za-z0-9_-]{32}")
_CSRF = re.compile(r"[a-z2-7]{26}")


def add_routes(app: web.Application, settings: Settings, desk: SigningDesk) -> None:
    """Serve the signing page on `app` through `desk`."""
    key = optional_bounce_key(settings)
    # Without a secret key no link is authentic anyway; a key of this process keeps the forms working.
    app[CSRF_KEY] = keyed_digest(key, b"mailroom signing csrf v1") if key else secrets.token_bytes(32)
    app[DESK], app[SETTINGS] = desk, settings
    app[SECURE] = settings.base_url.lower().startswith("https://")
    # The path browsers see: under MAILROOM_BASE_URL's own path when a proxy serves it with a prefix.
    app[COOKIE_PATH] = urlsplit(settings.base_url).path.rstrip("/") + "/s/"
    app.router.add_get("/s/{token}", signing_page)
    app.router.add_post("/s/{token}", sign)
    app.router.add_get("/s/{token}/login", login)


def _answer(locale: str, heading: str, lines: list[str], status: int = 200, **context: Any) -> web.Response:
    nonce = secrets.token_urlsafe(16)
    text = render(locale, nonce, heading, lines, **context)
    return web.Response(
        text=text, status=status, content_type="text/html", headers=page_headers(f"'nonce-{nonce}'")
    )


def csrf_token(key: bytes, token: str, nonce: str) -> str:
    """The form's CSRF token for this link and this browser's nonce."""
    return b32_prefix(
        keyed_digest(key, b"csrf\0" + token.encode("ascii") + b"\0" + nonce.encode("ascii")), 26
    )


def _nonce(request: web.Request) -> tuple[str, bool]:
    """(this browser's nonce, whether it is new): an existing well-formed cookie is kept (two open tabs)."""
    existing = request.cookies.get(COOKIE, "")
    if _NONCE.fullmatch(existing):
        return existing, False
    return secrets.token_urlsafe(24), True


def _token(request: web.Request) -> str:
    token = request.match_info["token"]
    return token if len(token) <= MAX_TOKEN and token.isascii() else ""


def _locale(request: web.Request, view: LinkView) -> str:
    return choose_locale(request.headers.get("Accept-Language"), view.locale)


def _busy(request: web.Request) -> web.Response | None:
    """A 429 page when this client's budget is spent, else None."""
    if request.app[DESK].allow(request.remote or ""):
        return None
    locale = choose_locale(request.headers.get("Accept-Language"), None)
    response = _answer(locale, words(locale)["busy_heading"], [words(locale)["busy_intro"]], status=429)
    response.headers["Retry-After"] = "60"
    return response


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _document(view: LinkView) -> dict[str, Any]:
    return {
        "doc": view,
        "signer": f"{view.signer_name} <{view.signer_email}>" if view.signer_name else view.signer_email,
    }


def _state_page(request: web.Request, view: LinkView, *, posted: bool) -> web.Response:
    """The page of a link that cannot sign now: used up, expired, superseded or not valid."""
    locale = _locale(request, view)
    t = words(locale)
    if view.state is LinkState.SIGNED:
        receipt = view.signature
        signed_at = _utc(receipt.signed_at) if receipt else ""
        return _answer(locale, t["already_heading"], [t["already_intro"]], status=409 if posted else 200,
                       receipt=receipt, signed_at=signed_at, **_document(view))  # fmt: skip
    if view.state is LinkState.EXPIRED:
        return _answer(locale, t["expired_heading"], [t["expired_intro"]], status=410)
    if view.state is LinkState.SUPERSEDED:
        return _answer(locale, t["superseded_heading"], [t["superseded_intro"]], status=410)
    return _answer(locale, t["invalid_heading"], [t["invalid_intro"]], status=404)


def _login_required(settings: Settings, view: LinkView) -> bool:
    if not view.require_login and not settings.oidc_required:
        return False
    # Imported only when a login may be required: the page works without Authlib.
    from worker.tracking import oidc

    return oidc.required(settings, view.require_login)


async def _identity(request: web.Request, view: LinkView) -> oidc.Identity | None:
    """The signer's login when one is required: an identity, or None (not logged in as this signer)."""
    from worker.tracking import oidc

    return await oidc.current_identity(request, view.signer_email)


async def _open_link(request: web.Request) -> tuple[str, LinkView] | web.Response:
    """A GET's link and its view when the client is within its budget and the link is valid, else the page to
    answer (429, or why the link cannot sign)."""
    busy = _busy(request)
    if busy is not None:
        return busy
    token = _token(request)
    view = await asyncio.to_thread(request.app[DESK].view, token)
    if view.state is not LinkState.VALID:
        return _state_page(request, view, posted=False)
    return token, view


async def signing_page(request: web.Request) -> web.Response:
    """GET /s/{token}: the document, the signer and the consent form (or why it cannot sign); changes nothing."""
    opened = await _open_link(request)
    if isinstance(opened, web.Response):
        return opened
    token, view = opened
    locale = _locale(request, view)
    t = words(locale)
    heading = t["sign_heading"].format(title=view.title)
    settings = request.app[SETTINGS]
    if _login_required(settings, view) and await _identity(request, view) is None:
        issuer = settings.oidc_issuer or ""
        return _answer(locale, heading, [t["login_intro"].format(issuer=issuer)],
                       login=f"{token}/login", **_document(view))  # fmt: skip
    nonce, new = _nonce(request)
    form = {
        # Relative to the page: right under a MAILROOM_BASE_URL with a path prefix too.
        "action": token,
        "csrf": csrf_token(request.app[CSRF_KEY], token, nonce),
        "referer": clean(request.headers.get("Referer"), MAX_REFERER) or "",
    }
    response = _answer(locale, heading, [t["sign_intro"]], form=form,
                       consent=t["consent"].format(title=view.title), **_document(view))  # fmt: skip
    if new:
        response.set_cookie(
            COOKIE,
            nonce,
            path=request.app[COOKIE_PATH],
            max_age=24 * 3600,
            httponly=True,
            samesite="Strict",
            secure=request.app[SECURE],
        )
    return response


async def login(request: web.Request) -> web.StreamResponse:
    """GET /s/{token}/login: off to the issuer, back to this link's page (never anywhere else)."""
    opened = await _open_link(request)
    if isinstance(opened, web.Response):
        return opened
    token, view = opened
    if not _login_required(request.app[SETTINGS], view):  # nothing to log in for: back to the page
        raise web.HTTPSeeOther(location=f"/s/{token}", headers={**NO_CACHE, **COMMON})
    from worker.tracking import oidc

    return oidc.login_redirect(request, f"/s/{token}", email=view.signer_email)


async def _form(request: web.Request) -> dict[str, str] | None:
    """The posted form (small, url-encoded or multipart), or None when it is not one; 413 past MAX_BODY."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY, actual_size=request.content_length)
    if request.content_type not in ("application/x-www-form-urlencoded", "multipart/form-data"):
        return None
    # The cap on the bytes read, whatever the request announced: a chunked body has no length to
    # check first, and the application's own cap is for the other pages. aiohttp raises 413 past it.
    capped = request.clone(client_max_size=MAX_BODY)
    try:
        posted = await capped.post()
    except (ValueError, UnicodeDecodeError):
        return None
    return {k: v for k, v in posted.items() if isinstance(v, str)}


async def sign(request: web.Request) -> web.Response:
    """POST /s/{token}: sign with the ticked consent box and a valid CSRF token; then the confirmation page."""
    busy = _busy(request)
    if busy is not None:
        return busy
    token = _token(request)
    form = await _form(request)
    nonce = request.cookies.get(COOKIE, "")
    posted_csrf = (form or {}).get("csrf", "")
    csrf_ok = bool(
        form is not None
        and _NONCE.fullmatch(nonce)
        and _CSRF.fullmatch(posted_csrf)
        and token
        and hmac.compare_digest(csrf_token(request.app[CSRF_KEY], token, nonce), posted_csrf)
    )
    view = await asyncio.to_thread(request.app[DESK].view, token)
    if view.state is not LinkState.VALID:
        return _state_page(request, view, posted=True)
    locale = _locale(request, view)
    t = words(locale)
    if not csrf_ok:
        log.info("signing form refused: CSRF token missing or wrong")
        return _answer(locale, t["csrf_heading"], [t["csrf_intro"]], status=403)
    assert form is not None
    if form.get("consent") != "yes":
        return _answer(locale, t["consent_heading"], [t["consent_intro"]], status=400)
    user_sub = f"email:{view.signer_email}"
    if _login_required(request.app[SETTINGS], view):
        identity = await _identity(request, view)
        if identity is None:
            return _answer(locale, t["login_heading"], [t["login_refused"]], status=403,
                           login=f"{token}/login")  # fmt: skip
        user_sub = str(identity.user_sub)
    ip, agent = client(request)
    referer = clean(form.get("referer"), MAX_REFERER) or clean(request.headers.get("Referer"), MAX_REFERER)
    proof = Proof(user_sub=user_sub, referer=referer, ip_address=ip, user_agent=agent)
    outcome: SignOutcome = await asyncio.to_thread(request.app[DESK].sign, token, proof)
    return _signed_page(request, outcome)


def _signed_page(request: web.Request, outcome: SignOutcome) -> web.Response:
    view, receipt = outcome.view, outcome.receipt
    if receipt is None:
        if view.state is LinkState.VALID:  # valid, yet refused: a login the document requires
            locale = _locale(request, view)
            return _answer(
                locale, words(locale)["login_heading"], [words(locale)["login_refused"]], status=403
            )
        return _state_page(request, view, posted=True)
    locale = _locale(request, view)
    t = words(locale)
    return _answer(
        locale,
        t["signed_heading"].format(title=view.title),
        [t["signed_intro"]],
        receipt=receipt,
        signed_at=_utc(receipt.signed_at),
        **_document(view),
    )
