"""A small OpenID Connect issuer in the test process: discovery, JWKS, /authorize that approves one configured
user at once, and /token that checks client authentication, the PKCE verifier and rotates refresh tokens.

Its answers can be bent the ways an attacker or a broken issuer would (another email, an unverified
one, a wrong nonce, issuer or audience, a signature that does not verify, a refusal to refresh), so
the tests play each against Mailroom's client over real HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.test_utils import TestServer
from joserfc import jwt
from joserfc.jwk import RSAKey

CLIENT_ID = "mailroom-signing"
CLIENT_SECRET = "s3cret:with/odd chars"


@dataclass
class Grant:
    """A code handed out by /authorize, spent once at /token."""

    challenge: str
    nonce: str
    redirect_uri: str


@dataclass
class Issuer:
    """The issuer's state and the ways a test bends its answers."""

    sub: str = "user-1234"
    email: str = "ada@example.com"
    email_verified: Any = True
    expires_in: int = 3600
    now: Callable[[], float] = time.time
    issuer: str = ""
    key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, parameters={"kid": "k1"}))
    other_key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, parameters={"kid": "k1"}))
    claims_override: dict[str, Any] = field(default_factory=dict)
    sign_with_other_key: bool = False
    give_refresh_token: bool = True
    refuse_refresh: bool = False
    id_token_on_refresh: bool = True
    codes: dict[str, Grant] = field(default_factory=dict)
    live_refresh_tokens: set[str] = field(default_factory=set)
    spent_refresh_tokens: set[str] = field(default_factory=set)
    authorize_requests: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)

    def id_token(self, nonce: str | None, access_token: str) -> str:
        """An ID token as this issuer signs it, with the test's overrides applied."""
        now = int(self.now())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "sub": self.sub,
            "email": self.email,
            "email_verified": self.email_verified,
            "iat": now,
            "exp": now + 300,
            "at_hash": _at_hash(access_token),
        }
        if nonce is not None:
            claims["nonce"] = nonce
        claims.update(self.claims_override)
        key = self.other_key if self.sign_with_other_key else self.key
        return jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key)

    def tokens(self, nonce: str | None, with_id_token: bool) -> dict[str, Any]:
        """A token response: access token, expiry, a new refresh token (remembered as live)."""
        access = secrets.token_urlsafe(24)
        answer: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
        }
        if with_id_token:
            answer["id_token"] = self.id_token(nonce, access)
        if self.give_refresh_token:
            refresh = secrets.token_urlsafe(32)
            self.live_refresh_tokens.add(refresh)
            answer["refresh_token"] = refresh
        return answer


def _at_hash(access_token: str) -> str:
    digest = hashlib.sha256(access_token.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest[:16]).rstrip(b"=").decode("ascii")


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode()


def _error(error: str, status: int = 400) -> web.Response:
    return web.json_response({"error": error}, status=status)


def make_issuer_app(idp: Issuer) -> web.Application:
    """The issuer's aiohttp application."""

    async def discovery(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": idp.issuer,
                "authorization_endpoint": idp.issuer + "/authorize",
                "token_endpoint": idp.issuer + "/token",
                "jwks_uri": idp.issuer + "/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "scopes_supported": ["openid", "email"],
            }
        )

    async def jwks(request: web.Request) -> web.Response:
        return web.json_response({"keys": [idp.key.as_dict(private=False)]})

    async def authorize(request: web.Request) -> web.Response:
        q = dict(request.query)
        idp.authorize_requests.append(q)
        if q.get("client_id") != CLIENT_ID or q.get("response_type") != "code":
            return _error("unauthorized_client")
        if q.get("code_challenge_method") != "S256" or len(q.get("code_challenge", "")) != 43:
            return _error("invalid_request")
        if set(q.get("scope", "").split()) != {"openid", "email"} or not q.get("nonce") or not q.get("state"):
            return _error("invalid_request")
        code = secrets.token_urlsafe(16)
        idp.codes[code] = Grant(q["code_challenge"], q["nonce"], q["redirect_uri"])
        target = q["redirect_uri"] + "?" + urlencode({"code": code, "state": q["state"]})
        raise web.HTTPFound(location=target)

    async def token(request: web.Request) -> web.Response:
        form = dict(await request.post())
        idp.token_requests.append({k: str(v) for k, v in form.items()})
        expected = base64.b64encode(b"mailroom-signing:s3cret%3Awith%2Fodd%20chars").decode()
        if request.headers.get("Authorization") != "Basic " + expected:
            return _error("invalid_client", 401)
        if form.get("grant_type") == "authorization_code":
            grant = idp.codes.pop(str(form.get("code", "")), None)
            if grant is None or form.get("redirect_uri") != grant.redirect_uri:
                return _error("invalid_grant")
            if _s256(str(form.get("code_verifier", ""))) != grant.challenge:
                return _error("invalid_grant")
            return web.json_response(idp.tokens(grant.nonce, with_id_token=True))
        if form.get("grant_type") == "refresh_token":
            presented = str(form.get("refresh_token", ""))
            if idp.refuse_refresh or presented not in idp.live_refresh_tokens:
                return _error("invalid_grant")
            idp.live_refresh_tokens.discard(presented)  # rotation: a refresh token works once
            idp.spent_refresh_tokens.add(presented)
            return web.json_response(idp.tokens(None, with_id_token=idp.id_token_on_refresh))
        return _error("unsupported_grant_type")

    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", discovery)
    app.router.add_get("/jwks", jwks)
    app.router.add_get("/authorize", authorize)
    app.router.add_post("/token", token)
    return app


@asynccontextmanager
async def running_issuer(idp: Issuer) -> AsyncIterator[Issuer]:
    """Serve the issuer on a local port; its issuer URL is set once the port is known."""
    server = TestServer(make_issuer_app(idp), host="127.0.0.1")
    await server.start_server()
    idp.issuer = str(server.make_url("")).rstrip("/")
    try:
        yield idp
    finally:
        await server.close()
