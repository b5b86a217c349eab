"""The login flow on the public server: the interface the signing page calls, and the `/oidc/*` routes.

A login travels in one short-lived cookie (encrypted and authenticated with `MAILROOM_SECRET_KEY`)
holding its state, nonce, PKCE verifier, the page to return to and the address expected; the
callback accepts only the state of the cookie of the browser that started the login, and only a
verified email equal to the expected address. A session cookie holds 256 random bits; the database
keeps their hash (`worker.tracking.oidc.sessions`).
"""

from __future__ import annotations

import hmac
import html
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
from aiohttp import web

from worker.core.config import ConfigError, Settings
from worker.core.crypto import KeylessBox, SecretBox, secret_box
from worker.core.rate_limit import RateLimiter
from worker.tracking.oidc import sessions
from worker.tracking.oidc.provider import IssuerError, LoginRefused, LoginStart, Provider
from worker.tracking.pages import POOL, client, page, page_headers

log = logging.getLogger("mailroom.tracker.oidc")

LOGIN_SECONDS = 600  # a login not finished within ten minutes starts again
ISSUER_TIMEOUT_SECONDS = 10.0
MAX_RETURN_PATH = 2000
_SAFE_PATH = re.compile(r"/s/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*(\?[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?")
_COOKIE_VALUE = re.compile(r"[A-Za-z0-9_-]{43}")
# The login's redirects: never cached, no Referer, never framed (its pages: worker.tracking.pages.page).
_HEADERS = page_headers("'unsafe-inline'")


@dataclass(frozen=True)
class Identity:
    """Who a session proves the signer is: the issuer's subject and the verified email address."""

    user_sub: str
    email: str


@dataclass
class Login:
    """The login state on the public server: the issuer, the secret box, the cookie names and the clock."""

    settings: Settings
    box: SecretBox
    secure: bool
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    provider: Provider | None = None
    # Each login and callback makes this server call the issuer: a budget per client network, so
    # nobody turns it into a way to hammer the issuer (or to wear out its rate limit for everyone).
    limiter: RateLimiter = field(default_factory=lambda: RateLimiter(per_minute=20, burst=10))

    @property
    def session_cookie(self) -> str:
        """The session cookie's name: `__Host-` over https, so no subdomain or plain-http page can set it."""
        return "__Host-mailroom_session" if self.secure else "mailroom_session"

    @property
    def login_cookie(self) -> str:
        """The name of the cookie that carries a login in progress."""
        return "__Host-mailroom_login" if self.secure else "mailroom_login"


LOGIN = web.AppKey("oidc_login", Login)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def same_address(a: str, b: str) -> bool:
    """Two addresses are one when they differ only in the case of ASCII letters: Unicode folding
    (`casefold()`, even `lower()`) makes "straße@" and "strasse@", or a Kelvin sign and "k", one."""
    return a.translate(_ASCII_LOWER) == b.translate(_ASCII_LOWER)


def configured(settings: Settings) -> bool:
    """Whether an issuer and a client are set, so signers can log in."""
    return bool(settings.oidc_issuer and settings.oidc_client_id)


def required(settings: Settings, document_require_login: bool) -> bool:
    """Whether a signer must log in: the installation requires it, or the document does.

    A document that requires login while no issuer is configured still requires it: its signers get
    a page saying login is required but not configured (a 503), never a page that lets them sign.
    """
    return settings.oidc_required or document_require_login


def safe_return_path(value: object) -> str | None:
    """The path a login may return to: a relative path on this server under `/s/`, else None (no open redirect)."""
    if not isinstance(value, str) or len(value) > MAX_RETURN_PATH:
        return None
    if not _SAFE_PATH.fullmatch(value) or "//" in value:
        return None
    # Percent-decoding must not reveal a way out either (/s/..%2f..%2f, an encoded // or backslash).
    decoded = unquote(value.partition("?")[0])
    if "\\" in decoded or "//" in decoded or "/../" in decoded + "/" or any(ord(c) < 32 for c in decoded):
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not parts.path.startswith("/s/"):
        return None
    return value


def _not_configured() -> web.Response:
    return page(
        "Login is required but not configured",
        "<p>This document may only be signed after logging in, and login is not set up on this server yet. "
        "Please tell the person who sent you the link.</p>",
        status=503,
    )


def _set_cookie(login: Login, response: web.StreamResponse, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name, value, max_age=max_age, path="/", secure=login.secure, httponly=True, samesite="Lax"
    )


def _seal(login: Login, pending: dict[str, Any]) -> str:
    return login.box.encrypt(json.dumps(pending, separators=(",", ":"))).decode("ascii")


def _unseal(login: Login, request: web.Request) -> dict[str, Any] | None:
    """The login in progress of this browser, or None when absent, altered or too old."""
    raw = request.cookies.get(login.login_cookie)
    if not raw or len(raw) > 4000:
        return None
    try:
        pending = json.loads(login.box.decrypt(raw.encode("ascii")))
    except (ConfigError, ValueError, UnicodeEncodeError):
        return None
    if not isinstance(pending, dict) or safe_return_path(pending.get("r")) is None:
        return None
    age = login.now().timestamp() - float(pending.get("t", 0))
    return pending if 0 <= age <= LOGIN_SECONDS else None


def login_redirect(request: web.Request, return_to: str, *, email: str | None = None) -> web.Response:
    """Send the browser to log in, then back to `return_to` (a path under `/s/` on this server, else a 400).

    With `email`, the callback accepts only that verified address (and asks the issuer for it as a
    hint), so a signer who logs in with another account is told so instead of being sent round again.
    """
    path = safe_return_path(return_to)
    if path is None:
        return page("Not a signing page", "<p>A login can only return to a signing page.</p>", status=400)
    login = request.app.get(LOGIN)
    if login is None or login.provider is None:
        return _not_configured()
    pending = {"r": path, "e": email, "t": login.now().timestamp()}
    response = web.Response(status=303, headers={**_HEADERS, "Location": "/oidc/login"})
    _set_cookie(login, response, login.login_cookie, _seal(login, pending), LOGIN_SECONDS)
    return response


def _over_budget(login: Login, request: web.Request) -> web.Response | None:
    """A 429 page when this client's network has used up its logins for now, else None."""
    if login.limiter.allow(request.remote or ""):
        return None
    response = page(
        "Too many attempts", "<p>Please wait a minute, then open your signing link again.</p>", status=429
    )
    response.headers["Retry-After"] = "60"
    return response


async def login_start(request: web.Request) -> web.StreamResponse:
    """GET /oidc/login: begin the authorization request (PKCE S256, state, nonce) and send the browser to the issuer."""
    login = request.app[LOGIN]
    if login.provider is None:
        return _not_configured()
    if (busy := _over_budget(login, request)) is not None:
        return busy
    pending = _unseal(login, request)
    asked = request.query.get("return_to")
    if asked is not None and (pending is None or pending["r"] != asked):
        if safe_return_path(asked) is None:
            return page("Not a signing page", "<p>A login can only return to a signing page.</p>", status=400)
        pending = {"r": asked, "e": None}
    if pending is None:
        return page("Login expired", "<p>Open your signing link again to log in.</p>", status=400)
    try:
        start = await login.provider.start(login_hint=pending.get("e"))
    except IssuerError as exc:
        log.error("OIDC login cannot start: %s", exc)
        return _unavailable()
    sealed = {
        **pending,
        "s": start.state,
        "n": start.nonce,
        "v": start.code_verifier,
        "t": login.now().timestamp(),
    }
    response = web.Response(status=302, headers={**_HEADERS, "Location": start.url})
    _set_cookie(login, response, login.login_cookie, _seal(login, sealed), LOGIN_SECONDS)
    return response


def _unavailable() -> web.Response:
    return page(
        "Login unavailable",
        "<p>The login service cannot be reached just now. Please try again in a few minutes.</p>",
        status=503,
    )


def _refused(reason: str) -> web.Response:
    log.warning("OIDC login refused: %s", reason)
    return page(
        "Login not accepted",
        "<p>Your identity could not be confirmed. Open your signing link again to log in once more.</p>",
        status=403,
    )


async def callback(request: web.Request) -> web.StreamResponse:
    """GET /oidc/callback: check state, trade the code (with the PKCE verifier), prove the ID token, start a session."""
    login = request.app[LOGIN]
    if login.provider is None:
        return _not_configured()
    if (busy := _over_budget(login, request)) is not None:
        return busy
    pending = _unseal(login, request)
    if pending is None or not isinstance(pending.get("s"), str):
        return page("Login expired", "<p>Open your signing link again to log in.</p>", status=400)
    state = request.query.get("state", "")
    if not hmac.compare_digest(state.encode("utf-8", "replace"), str(pending["s"]).encode("utf-8")):
        return _refused("the state does not match this browser's login")
    if "error" in request.query or not request.query.get("code"):
        log.info("OIDC login not completed: %s", request.query.get("error", "no code")[:100])
        return page("Login not completed", "<p>Open your signing link again to log in.</p>", status=403)
    start = LoginStart("", str(pending["s"]), str(pending["n"]), str(pending["v"]))
    try:
        tokens = await login.provider.exchange(request.query["code"], start)
    except LoginRefused as exc:
        return _refused(str(exc))
    except IssuerError as exc:
        log.error("OIDC login cannot finish: %s", exc)
        return _unavailable()
    expected = pending.get("e")
    if isinstance(expected, str) and not same_address(tokens.email, expected):
        log.warning("OIDC login refused: the verified address is not the link's")
        response = page(
            "Another account",
            f"<p>You logged in as {html.escape(tokens.email)}, which is not the address this signing link "
            "was sent to. Log in with that address's account, or ask for a link for yours.</p>",
            status=403,
        )
        response.del_cookie(login.login_cookie, path="/")
        return response
    cookie = secrets.token_urlsafe(32)
    ip, agent = client(request)
    now = login.now()
    refresh = login.box.encrypt(tokens.refresh_token) if tokens.refresh_token else None
    async with request.app[POOL].connection() as conn:
        old = request.cookies.get(login.session_cookie)
        if old:  # a login replaces this browser's session: never two live ids for one browser
            await conn.execute(sessions.DELETE_BY_HASH, (sessions.secret_hash(old),))
        values = {
            "hash": sessions.secret_hash(cookie),
            "sub": tokens.user_sub,
            "email": tokens.email,
            "refresh": refresh,
            "expires": now + timedelta(seconds=tokens.expires_in),
            "agent": agent,
            "ip": ip,
            "now": now,
        }
        await sessions.create(conn, values)
    log.info("OIDC session started")
    response = web.Response(status=303, headers={**_HEADERS, "Location": str(pending["r"])})
    response.del_cookie(login.login_cookie, path="/")
    _set_cookie(login, response, login.session_cookie, cookie, int(sessions.IDLE.total_seconds()))
    return response


async def current_identity(request: web.Request, link_email: str) -> Identity | None:
    """Who the session cookie proves the signer is, when that is `link_email` (case-insensitive); else None.

    A session past the idle limit, or used from another user agent or network (the theft rule), is
    deleted; an expired access token is refreshed first (the rotated refresh token stored
    encrypted), and a refusal to refresh ends the session.
    """
    login = request.app.get(LOGIN)
    if login is None or login.provider is None:
        return None
    cookie = request.cookies.get(login.session_cookie, "")
    if not _COOKIE_VALUE.fullmatch(cookie):
        return None
    ip, agent = client(request)
    now = login.now()
    async with request.app[POOL].connection() as conn:
        row = await sessions.find(conn, cookie)
        if row is None:
            return None
        reason = "unused too long" if sessions.idle(row, now) else sessions.theft(row, agent, ip)
        if reason is not None:
            await conn.execute(sessions.DELETE, (row.id,))
            log.warning("OIDC session %d ended: %s", row.id, reason)
            return None
        if not same_address(row.email, link_email):
            return None
        if row.access_token_expires_at is not None and row.access_token_expires_at <= now:
            if not await _refresh(login, conn, cookie, now):
                return None
        else:
            await conn.execute(sessions.TOUCH, {"now": now, "id": row.id})
    return Identity(row.user_sub, row.email)


async def _refresh(login: Login, conn: Any, cookie: str, now: datetime) -> bool:
    """Refresh the session's tokens under its row lock (two requests never spend one rotating token twice)."""
    assert login.provider is not None
    async with conn.transaction():
        row = await sessions.find(conn, cookie, lock=True)
        if row is None:
            return False
        if row.access_token_expires_at is not None and row.access_token_expires_at > now:
            return True  # another request refreshed it while this one waited for the lock
        if row.refresh_token_encrypted is None:
            await conn.execute(sessions.DELETE, (row.id,))
            log.info(
                "OIDC session %d ended: the access token expired and the issuer gave no refresh token", row.id
            )
            return False
        try:
            refresh_token = login.box.decrypt(row.refresh_token_encrypted)
        except ConfigError:  # stored under a key since rotated (`mailroom keys rotate` keeps no sessions)
            await conn.execute(sessions.DELETE, (row.id,))
            log.warning(
                "OIDC session %d ended: its refresh token was stored under another secret key", row.id
            )
            return False
        try:
            tokens = await login.provider.refresh(refresh_token, row.user_sub)
        except LoginRefused as exc:
            await conn.execute(sessions.DELETE, (row.id,))
            log.warning("OIDC session %d ended: %s", row.id, exc)
            return False
        except IssuerError as exc:
            log.error("OIDC session %d not refreshed: %s", row.id, exc)
            return False
        assert tokens.refresh_token is not None
        values = {
            "refresh": login.box.encrypt(tokens.refresh_token),
            "expires": now + timedelta(seconds=tokens.expires_in),
            "now": now,
            "id": row.id,
        }
        await conn.execute(sessions.REFRESHED, values)
    return True


async def logout_page(request: web.Request) -> web.Response:
    """GET /oidc/logout: a button that POSTs (a link followed by a scanner must not log anyone out)."""
    form = '<form method="post" action="/oidc/logout"><button type="submit">Log out</button></form>'
    return page("Log out", f"<p>End your login on this browser?</p>{form}")


async def logout(request: web.Request) -> web.Response:
    """POST /oidc/logout: delete this browser's session and its cookie."""
    login = request.app[LOGIN]
    cookie = request.cookies.get(login.session_cookie, "")
    if _COOKIE_VALUE.fullmatch(cookie):
        async with request.app[POOL].connection() as conn:
            await conn.execute(sessions.DELETE_BY_HASH, (sessions.secret_hash(cookie),))
    response = page("Logged out", "<p>You are logged out on this browser.</p>")
    response.del_cookie(login.session_cookie, path="/")
    return response


def _client_secret(settings: Settings) -> str | None:
    if settings.oidc_client_secret:
        return settings.oidc_client_secret
    if settings.oidc_client_secret_file is None:
        return None
    try:
        return settings.oidc_client_secret_file.read_text(encoding="utf-8").strip() or None
    except OSError as exc:
        raise ConfigError(f"MAILROOM_OIDC_CLIENT_SECRET_FILE cannot be read: {exc.strerror}") from None


def add_routes(app: web.Application, url: str, settings: Settings) -> None:
    """Serve `/oidc/login`, `/oidc/callback` and `/oidc/logout`; without an issuer they answer that login is not configured.

    `url` is the database the server uses (the pool of `worker.tracking.server` serves the sessions).
    A configured issuer without `MAILROOM_SECRET_KEY` is a `ConfigError` now: refresh tokens and
    logins in progress are kept encrypted with it.
    """
    del url  # the server's pool already reaches it
    secure = settings.base_url.lower().startswith("https://")
    if not configured(settings):
        app[LOGIN] = Login(
            settings, KeylessBox(ConfigError("no OpenID Connect issuer is configured")), secure
        )
        if settings.oidc_required:
            log.error("MAILROOM_OIDC_REQUIRED is set but no issuer is configured: nobody can sign")
    else:
        login = Login(settings, secret_box(settings), secure)
        app[LOGIN] = login
        secret = _client_secret(settings)

        async def issuer_client(app: web.Application) -> AsyncIterator[None]:
            timeout = aiohttp.ClientTimeout(total=ISSUER_TIMEOUT_SECONDS)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                assert settings.oidc_issuer is not None
                assert settings.oidc_client_id is not None
                login.provider = Provider(
                    settings.oidc_issuer,
                    settings.oidc_client_id,
                    secret,
                    settings.base_url + "/oidc/callback",
                    http,
                    now=lambda: login.now().timestamp(),
                )
                yield
                login.provider = None

        app.cleanup_ctx.append(issuer_client)
    app.router.add_get("/oidc/login", login_start)
    app.router.add_get("/oidc/callback", callback)
    app.router.add_get("/oidc/logout", logout_page)
    app.router.add_post("/oidc/logout", logout)
