"""Access tokens for Gmail API senders: the JWT bearer grant (RFC 7523) as a Workspace user, cached.

The service account signs a JWT (RS256, with PyJWT) whose issuer is the service account, whose
subject (`sub`) is the Workspace user it impersonates through domain-wide delegation, whose audience
is the key's `token_uri` and whose scope is `gmail.send` alone; the token endpoint exchanges it for an
access token. Every connection of a worker process to a sender shares one token until shortly before
it expires, one request at a time per sender, as the OAuth2 (XOAUTH2) tokens are (`worker.engine.oauth`).

What goes wrong says whose fault it is, in the same words as there: an endpoint that refuses the
grant (`unauthorized_client`: no domain-wide delegation for this scope; `invalid_grant`: a deleted
key, an unknown user) raises `TokenRefused`, which suspends the sender; one that cannot be reached
or answers nonsense raises `TokenUnavailable`, which opens its circuit.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from worker.core.gmail_key import GMAIL_SEND_SCOPE, ServiceAccountKey
from worker.engine.oauth import REFRESH_MARGIN_SECONDS, Grant, TokenUnavailable, grant_from

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# Google accepts assertions valid for an hour at most.
ASSERTION_SECONDS = 3600
_MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class GmailAccount:
    """How a Gmail API sender account sends: its service account key, the user it sends as, the API."""

    key: ServiceAccountKey = field(repr=False)
    subject: str
    api_url: str  # MAILROOM_GMAIL_API_URL, without a trailing slash

    @property
    def identity(self) -> str:
        """Names this key and user without revealing the key: a new key or user is a new identity."""
        text = "\0".join((self.key.client_email, self.key.private_key, self.key.token_uri, self.subject))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def assertion(account: GmailAccount, now: float) -> str:
    """The signed JWT the token endpoint exchanges for an access token as `account.subject`."""
    import jwt

    issued = int(now)
    claims = {
        "iss": account.key.client_email,
        "sub": account.subject,
        "scope": GMAIL_SEND_SCOPE,
        "aud": account.key.token_uri,
        "iat": issued,
        "exp": issued + ASSERTION_SECONDS,
    }
    return jwt.encode(
        claims, account.key.private_key, algorithm="RS256", headers={"kid": account.key.private_key_id}
    )


async def fetch_gmail_grant(session: aiohttp.ClientSession, account: GmailAccount, seconds: float) -> Grant:
    """Ask the key's token endpoint for an access token within `seconds` (redirects refused: the
    assertion goes to the endpoint the key names and nowhere else)."""
    form = {"grant_type": JWT_BEARER, "assertion": assertion(account, time.time())}
    try:
        async with session.post(
            account.key.token_uri,
            data=form,
            headers={"Accept": "application/json"},
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=seconds),
        ) as response:
            body = await response.content.read(_MAX_BODY)
            status = response.status
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        raise TokenUnavailable(
            f"Google token endpoint unreachable: {type(exc).__name__}: {exc}".strip()
        ) from None
    return grant_from(status, body)


Fetch = Callable[[aiohttp.ClientSession, GmailAccount, float], Awaitable[Grant]]


@dataclass(eq=False)
class _Entry:
    lock: asyncio.Lock
    identity: str
    access_token: str | None = field(default=None, repr=False)
    refresh_at: float = 0.0


class GmailTokens:
    """The Gmail API access tokens of one worker process, one per sender account."""

    def __init__(
        self,
        fetch: Fetch = fetch_gmail_grant,
        clock: Callable[[], float] = time.monotonic,
        margin: float = REFRESH_MARGIN_SECONDS,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._margin = margin
        self._entries: dict[int, _Entry] = {}

    async def token(
        self, sender_id: int, account: GmailAccount, session: aiohttp.ClientSession, seconds: float
    ) -> str:
        """A valid access token for the sender: the cached one, or a fresh one (asked within `seconds`)."""
        entry = self._entries.get(sender_id)
        if entry is None or entry.identity != account.identity:
            # New, or an operator gave it another key or user: what was cached is for someone else.
            entry = _Entry(asyncio.Lock(), account.identity)
            self._entries[sender_id] = entry
        async with entry.lock:
            if entry.access_token is not None and self._clock() < entry.refresh_at:
                return entry.access_token
            grant = await self._fetch(session, account, seconds)
            lifetime = grant.expires_in
            entry.access_token = grant.access_token
            entry.refresh_at = self._clock() + lifetime - min(self._margin, lifetime / 2)
            return grant.access_token

    def refused(self, sender_id: int, access_token: str) -> None:
        """The API refused this token (401): the next `token` asks the endpoint for a new one."""
        entry = self._entries.get(sender_id)
        if entry is not None and entry.access_token == access_token:
            entry.access_token = None
