"""The OpenID Connect issuer as Mailroom talks to it: discovery, the authorization request, token requests
and ID token validation.

The protocol pieces are Authlib's (PKCE's S256 challenge, the authorization URI, the token request
bodies, the state check of the callback, the discovery document's rules, the ID token's claims:
issuer, audience, expiry, nonce, azp, at_hash) and joserfc's (the JWS signature against the
issuer's JWKS); this module only carries them over aiohttp, which the public server already runs on.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
from authlib.common.security import generate_token  # type: ignore[import-untyped]
from authlib.oauth2.rfc6749.parameters import (  # type: ignore[import-untyped]
    prepare_grant_uri,
    prepare_token_request,
)
from authlib.oauth2.rfc7636 import create_s256_code_challenge  # type: ignore[import-untyped]
from authlib.oidc.core import CodeIDToken  # type: ignore[import-untyped]
from authlib.oidc.discovery import OpenIDProviderMetadata  # type: ignore[import-untyped]
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

SCOPES = "openid email"
# Discovery and keys are read again after this long (an issuer rotates its keys; an unknown key id
# also fetches them again at once).
METADATA_SECONDS = 3600.0
# Clock skew allowed between the issuer and us when checking an ID token's times.
LEEWAY_SECONDS = 60
# What the issuer's answers may weigh: a discovery document, a key set, a token response.
MAX_ANSWER_BYTES = 256 * 1024
# The discovery document's members this flow uses, each checked by Authlib's rules (https, or http on
# loopback only); the others are the issuer's business.
_CHECKED = (
    "issuer",
    "authorization_endpoint",
    "token_endpoint",
    "jwks_uri",
    "response_types_supported",
    "id_token_signing_alg_values_supported",
    "code_challenge_methods_supported",
)


class IssuerError(Exception):
    """The issuer could not be reached or answered something this flow cannot use (logged, never shown)."""


class LoginRefused(Exception):
    """The issuer's answer does not prove who the signer is: the message says why (logged, shown neutrally)."""


@dataclass(frozen=True)
class LoginStart:
    """What the browser is sent to the issuer with, and what the callback checks its answer against."""

    url: str
    state: str
    nonce: str
    code_verifier: str


@dataclass(frozen=True)
class Tokens:
    """The useful part of a token response: the proven identity (from a login) and the refresh token."""

    user_sub: str
    email: str
    refresh_token: str | None
    expires_in: float


@dataclass
class Provider:
    """One configured issuer and client; discovery and keys are fetched lazily and cached."""

    issuer: str
    client_id: str
    client_secret: str | None
    redirect_uri: str
    http: aiohttp.ClientSession
    now: Callable[[], float] = time.time
    _metadata: dict[str, Any] | None = None
    _keys: KeySet | None = None
    _fetched_at: float = 0.0

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            async with self.http.get(url, allow_redirects=False) as response:
                if response.status != 200:
                    raise IssuerError(f"GET {url}: HTTP {response.status}")
                body = await response.content.read(MAX_ANSWER_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IssuerError(f"GET {url}: {exc.__class__.__name__}: {exc}") from None
        return _json_object(body, url)

    async def metadata(self) -> dict[str, Any]:
        """The issuer's discovery document, checked: its issuer is exactly the configured one."""
        if self._metadata is not None and self.now() - self._fetched_at < METADATA_SECONDS:
            return self._metadata
        url = self.issuer + "/.well-known/openid-configuration"
        document = await self._get_json(url)
        if document.get("issuer") != self.issuer:
            # OpenID Connect Discovery 1.0 §4.3: an issuer other than the one asked is not to be used.
            raise IssuerError(f"{url} names the issuer {document.get('issuer')!r}, not {self.issuer!r}")
        checked = OpenIDProviderMetadata(document)
        try:
            for key in _CHECKED:
                getattr(checked, f"validate_{key}")()
        except ValueError as exc:
            raise IssuerError(f"{url}: {exc}") from None
        if "S256" not in document.get("code_challenge_methods_supported", ["S256"]):
            raise IssuerError(f"{url}: the issuer does not take PKCE S256")
        self._metadata, self._keys, self._fetched_at = document, None, self.now()
        return document

    async def _key_set(self, refresh: bool = False) -> KeySet:
        if self._keys is None or refresh:
            metadata = await self.metadata()
            try:
                keys = await self._get_json(str(metadata["jwks_uri"]))
                self._keys = KeySet.import_key_set(keys)  # type: ignore[arg-type]
            except (ValueError, TypeError, KeyError, JoseError) as exc:
                raise IssuerError(f"the issuer's key set cannot be read: {exc}") from None
        return self._keys

    async def start(self, login_hint: str | None = None) -> LoginStart:
        """A new authorization request: fresh state, nonce and PKCE verifier, and the URL to send the browser to."""
        metadata = await self.metadata()
        state, nonce, verifier = generate_token(32), generate_token(32), generate_token(64)
        extra = {"nonce": nonce, "code_challenge": create_s256_code_challenge(verifier)}
        extra["code_challenge_method"] = "S256"
        if login_hint:
            extra["login_hint"] = login_hint
        url = prepare_grant_uri(
            str(metadata["authorization_endpoint"]),
            self.client_id,
            "code",
            redirect_uri=self.redirect_uri,
            scope=SCOPES,
            state=state,
            **extra,
        )
        return LoginStart(str(url), state, nonce, verifier)

    async def _token_request(self, body: str) -> dict[str, Any]:
        metadata = await self.metadata()
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
        if self.client_secret is not None:
            # client_secret_basic (RFC 6749 §2.3.1): each part form-encoded before base64.
            pair = f"{quote(self.client_id, safe='')}:{quote(self.client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
        url = str(metadata["token_endpoint"])
        try:
            async with self.http.post(url, data=body, headers=headers, allow_redirects=False) as response:
                status = response.status
                raw = await response.content.read(MAX_ANSWER_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IssuerError(f"POST {url}: {exc.__class__.__name__}: {exc}") from None
        if status in (400, 401):
            answer = _json_object(raw, url) if raw.strip().startswith(b"{") else {}
            raise LoginRefused(
                f"the issuer refused the token request: {str(answer.get('error', status))[:100]}"
            )
        if status != 200:
            raise IssuerError(f"POST {url}: HTTP {status}")
        return _json_object(raw, url)

    async def exchange(self, code: str, start: LoginStart) -> Tokens:
        """Trade the callback's code for tokens and prove the ID token: signature, issuer, audience, times, nonce."""
        body = prepare_token_request(
            "authorization_code",
            code=code,
            redirect_uri=self.redirect_uri,
            client_id=self.client_id,
            code_verifier=start.code_verifier,
        )
        answer = await self._token_request(str(body))
        claims = await self.id_token_claims(answer, nonce=start.nonce)
        if claims.get("email_verified") is not True:
            raise LoginRefused("the issuer does not say the email address is verified")
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email or len(email) > 254:
            raise LoginRefused("the ID token carries no email address")
        return Tokens(str(claims["sub"]), email, _refresh_token(answer), _expires_in(answer))

    async def refresh(self, refresh_token: str, user_sub: str) -> Tokens:
        """Use a refresh token: the new refresh token (rotation), or the old one when the issuer keeps it."""
        body = prepare_token_request("refresh_token", refresh_token=refresh_token, client_id=self.client_id)
        answer = await self._token_request(str(body))
        if "id_token" in answer:
            # OpenID Connect Core §12.2: a refreshed ID token is about the same person.
            claims = await self.id_token_claims(answer, nonce=None)
            if str(claims["sub"]) != user_sub:
                raise LoginRefused("the refreshed ID token is about another subject")
        return Tokens(user_sub, "", _refresh_token(answer) or refresh_token, _expires_in(answer))

    async def id_token_claims(self, answer: Mapping[str, Any], nonce: str | None) -> dict[str, Any]:
        """The claims of the answer's ID token once its signature and claims are proven, else `LoginRefused`."""
        raw = answer.get("id_token")
        if not isinstance(raw, str):
            raise LoginRefused("the token response has no ID token")
        metadata = await self.metadata()
        algorithms = [
            a for a in metadata.get("id_token_signing_alg_values_supported", ["RS256"]) if a != "none"
        ]
        registry = JWSRegistry(algorithms=algorithms or ["RS256"], strict_check_header=False)
        try:
            try:
                token = jwt.decode(raw, await self._key_set(), registry=registry)
            except InvalidKeyIdError:  # the issuer rotated its keys since we read them
                token = jwt.decode(raw, await self._key_set(refresh=True), registry=registry)
            options = {
                "iss": {"essential": True, "value": self.issuer},
                "aud": {"essential": True, "value": self.client_id},
                "sub": {"essential": True},
            }
            params: dict[str, Any] = {"client_id": self.client_id}
            if nonce is not None:
                params["nonce"] = nonce
            if isinstance(answer.get("access_token"), str):
                params["access_token"] = answer["access_token"]
            claims = CodeIDToken(token.claims, token.header, options, params)
            claims.validate(now=int(self.now()), leeway=LEEWAY_SECONDS)
            if nonce is not None and claims.get("nonce") != nonce:
                raise LoginRefused("the ID token's nonce is not this login's")
        except (JoseError, ValueError) as exc:
            raise LoginRefused(f"the ID token is not valid: {exc.__class__.__name__}: {exc}") from None
        return dict(claims)


def _json_object(body: bytes, url: str) -> dict[str, Any]:
    import json

    if len(body) > MAX_ANSWER_BYTES:
        raise IssuerError(f"{url}: the answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        value = json.loads(body)
    except ValueError:
        raise IssuerError(f"{url}: the answer is not JSON") from None
    if not isinstance(value, dict):
        raise IssuerError(f"{url}: the answer is not a JSON object")
    return value


def _refresh_token(answer: Mapping[str, Any]) -> str | None:
    value = answer.get("refresh_token")
    return value if isinstance(value, str) and value else None


def _expires_in(answer: Mapping[str, Any]) -> float:
    """The access token's lifetime; an issuer that does not say is taken to give an hour (RFC 6749 §5.1's common value)."""
    value = answer.get("expires_in")
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 366 * 86400:
        return float(value)
    return 3600.0
