"""OAuth2 access tokens for SMTP AUTH XOAUTH2 (Gmail, Microsoft 365), cached per sender account.

A token is asked from the account's token endpoint with its refresh token (RFC 6749 §6: a form POST
of grant_type, refresh_token, client_id and client_secret), over the standard library's HTTP client
on a thread, bounded by the account's connect timeout. Every SMTP connection of a worker process
shares one token per sender account until shortly before it expires; one refresh at a time per
account. A refresh token the endpoint rotates (Microsoft does) is kept and stored back encrypted.

What goes wrong says whose fault it is: an endpoint that refuses the client or the grant
(`TokenRefused`) is the account's login failing, so the sender is suspended; an endpoint that cannot
be reached or answers nonsense (`TokenUnavailable`) is an outage, so the sender's circuit opens.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from urllib.request import OpenerDirector

log = logging.getLogger("mailroom.worker")

# Refreshed this long before the endpoint says it expires (at most half its life).
REFRESH_MARGIN_SECONDS = 60.0
# When the endpoint leaves expires_in out (it is only RECOMMENDED), the hour Google and Microsoft give.
DEFAULT_LIFETIME_SECONDS = 3600.0
_MAX_BODY = 64 * 1024
# RFC 6749 §5.2: the endpoint refuses the request itself. Each one is the account's configuration,
# which a retry does not mend.
_REFUSALS = frozenset(
    {"invalid_grant", "invalid_client", "unauthorized_client", "invalid_request", "invalid_scope",
     "unsupported_grant_type"}
)  # fmt: skip


@dataclass(frozen=True)
class OAuthClient:
    """How a sender account gets its access tokens: the endpoint, the client and its refresh token."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    refresh_token: str = field(repr=False)
    # The refresh token as stored (encrypted): a rotated one replaces exactly this value, nothing newer.
    stored_refresh_token: bytes = field(default=b"", repr=False)

    @property
    def identity(self) -> str:
        """Names this client and grant without revealing them: a changed secret or grant is a new identity."""
        text = "\0".join((self.token_url, self.client_id, self.client_secret, self.refresh_token))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


class TokenRefused(Exception):
    """The endpoint refused the client or the refresh token (RFC 6749 §5.2): the login fails."""


class TokenUnavailable(Exception):
    """No usable answer from the endpoint: unreachable, too slow, a server error, or not a token."""


@dataclass(frozen=True)
class Grant:
    """What the endpoint gave: an access token, its lifetime and, when rotated, a new refresh token."""

    access_token: str = field(repr=False)
    expires_in: float
    refresh_token: str | None = field(default=None, repr=False)


Fetch = Callable[[OAuthClient, float], Awaitable[Grant]]
# Stores a rotated refresh token for a sender in place of the stored one; returns the new stored value.
StoreRefreshToken = Callable[[int, bytes, str], Awaitable[bytes | None]]


@dataclass(eq=False)
class _Entry:
    lock: asyncio.Lock
    identities: set[str]
    client: OAuthClient = field(repr=False)
    access_token: str | None = field(default=None, repr=False)
    refresh_at: float = 0.0


class TokenCache:
    """The access tokens of one worker process, one per sender account, shared by all its connections."""

    def __init__(
        self,
        fetch: Fetch | None = None,
        store: StoreRefreshToken | None = None,
        clock: Callable[[], float] = time.monotonic,
        margin: float = REFRESH_MARGIN_SECONDS,
    ) -> None:
        self._fetch = fetch or fetch_grant
        self._store = store
        self._clock = clock
        self._margin = margin
        self._entries: dict[int, _Entry] = {}

    async def token(self, sender_id: int, client: OAuthClient, seconds: float) -> str:
        """A valid access token for the sender: the cached one, or a fresh one from the endpoint
        (asked within `seconds`)."""
        entry = self._entry(sender_id, client)
        async with entry.lock:
            if entry.access_token is not None and self._clock() < entry.refresh_at:
                return entry.access_token
            grant = await self._fetch(entry.client, seconds)
            lifetime = grant.expires_in
            entry.access_token = grant.access_token
            entry.refresh_at = self._clock() + lifetime - min(self._margin, lifetime / 2)
            if grant.refresh_token and grant.refresh_token != entry.client.refresh_token:
                await self._rotated(sender_id, entry, grant.refresh_token)
            return grant.access_token

    def refused(self, sender_id: int, access_token: str) -> None:
        """The SMTP server refused this token: the next `token` asks the endpoint for a new one."""
        entry = self._entries.get(sender_id)
        if entry is not None and entry.access_token == access_token:
            entry.access_token = None

    def _entry(self, sender_id: int, client: OAuthClient) -> _Entry:
        entry = self._entries.get(sender_id)
        if entry is None or client.identity not in entry.identities:
            # New, or its client, secret or grant changed (by an operator): start from what is stored.
            entry = _Entry(asyncio.Lock(), {client.identity}, client)
            self._entries[sender_id] = entry
        return entry

    async def _rotated(self, sender_id: int, entry: _Entry, refresh_token: str) -> None:
        """The endpoint replaced the refresh token: use it from now on and store it in place of the old one."""
        old = entry.client
        stored = old.stored_refresh_token
        if self._store is not None:
            stored = await self._store(sender_id, old.stored_refresh_token, refresh_token) or stored
        entry.client = OAuthClient(old.token_url, old.client_id, old.client_secret, refresh_token, stored)
        # The account as read again from the database (with the new refresh token) is this same grant.
        entry.identities.add(entry.client.identity)
        log.info("sender account %s: the token endpoint rotated its refresh token", sender_id)


async def fetch_grant(client: OAuthClient, seconds: float) -> Grant:
    """Ask the endpoint for an access token with the refresh token, within `seconds` (on a thread:
    urllib blocks)."""
    import http.client

    form = urllib.parse.urlencode(refresh_form(client)).encode("ascii")
    try:
        status, body = await asyncio.wait_for(
            asyncio.to_thread(_post, client.token_url, form, seconds), seconds + 1
        )
    except (OSError, TimeoutError, ValueError, http.client.HTTPException) as exc:
        raise TokenUnavailable(f"OAuth2 token endpoint unreachable: {type(exc).__name__}: {exc}") from None
    return grant_from(status, body)


# Microsoft's v2.0 endpoint asks for the scope again when refreshing (Google takes the grant's own).
MICROSOFT_SMTP_SCOPE = "https://outlook.office.com/SMTP.Send offline_access"
_MICROSOFT_HOSTS = (
    "login.microsoftonline.com",
    "login.microsoftonline.us",
    "login.partner.microsoftonline.cn",
)


def refresh_form(client: OAuthClient) -> dict[str, str]:
    """The fields of a refresh_token grant request (RFC 6749 §6) to the client's endpoint."""
    form = {
        "grant_type": "refresh_token",
        "refresh_token": client.refresh_token,
        "client_id": client.client_id,
        "client_secret": client.client_secret,
    }
    if urllib.parse.urlsplit(client.token_url).hostname in _MICROSOFT_HOSTS:
        form["scope"] = MICROSOFT_SMTP_SCOPE
    return form


def grant_from(status: int, body: bytes) -> Grant:
    """The grant in an endpoint's answer, or why there is none (`TokenRefused`, `TokenUnavailable`)."""
    try:
        answer: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        answer = None
    if not isinstance(answer, dict):
        raise TokenUnavailable(f"OAuth2 token endpoint answered {status} without a JSON object")
    error = answer.get("error")
    if status in (400, 401) and isinstance(error, str) and error in _REFUSALS:
        description = answer.get("error_description")
        reason = f"{error}: {description}" if isinstance(description, str) and description else error
        raise TokenRefused(_printable(reason, 300))
    if status != 200:
        raise TokenUnavailable(f"OAuth2 token endpoint answered {status} {_printable(str(error or ''), 100)}")
    token, token_type = answer.get("access_token"), answer.get("token_type", "Bearer")
    if not isinstance(token, str) or not token or not str(token_type).lower() == "bearer":
        raise TokenUnavailable("OAuth2 token endpoint answered 200 without a bearer access token")
    expires_in = answer.get("expires_in", DEFAULT_LIFETIME_SECONDS)
    try:
        lifetime = float(expires_in)
    except (TypeError, ValueError):
        lifetime = DEFAULT_LIFETIME_SECONDS
    refresh = answer.get("refresh_token")
    return Grant(token, max(lifetime, 1.0), refresh if isinstance(refresh, str) and refresh else None)


def _printable(text: str, limit: int) -> str:
    return "".join(c if c.isprintable() else " " for c in text)[:limit]


@functools.cache
def _opener() -> OpenerDirector:
    """urllib's opener with redirects refused, built when a token is first fetched (urllib is slow to load)."""
    import urllib.request

    class _NoRedirects(urllib.request.HTTPRedirectHandler):
        """A token endpoint that redirects is misconfigured: the form (with the secret) goes nowhere else."""

        def redirect_request(self, *_: Any, **__: Any) -> None:
            return None

    return urllib.request.build_opener(_NoRedirects())


def _post(url: str, form: bytes, timeout: float) -> tuple[int, bytes]:
    """POST the form; the status and (at most 64 KiB of) the body, error statuses included."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(  # noqa: S310 -- the URL's scheme is checked when stored
        url,
        data=form,
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
    )
    try:
        with _opener().open(request, timeout=timeout) as response:
            return int(response.status), response.read(_MAX_BODY)
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), exc.read(_MAX_BODY)
