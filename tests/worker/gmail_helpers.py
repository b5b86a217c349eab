"""A local Google: a token endpoint that checks the JWT bearer grant with the service account's public
key, and a Gmail API `users.messages.send` that checks the access token and keeps the raw bytes."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
import psycopg
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from worker.core.crypto import SecretBox
from worker.core.gmail_key import GMAIL_SEND_SCOPE
from worker.ops.senders import SenderSpec, add_sender

SUBJECT = "noreply@example.org"
SERVICE_ACCOUNT = "mailroom-sender@example-project.iam.gserviceaccount.com"
KEY_ID = "0123456789abcdef0123456789abcdef01234567"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def service_account_key(pem: bytes, token_uri: str, **extra: Any) -> str:
    """A service account key file's text, as Google's console writes it, for `pem` and `token_uri`."""
    data = {
        "type": "service_account",
        "project_id": "example-project",
        "private_key_id": KEY_ID,
        "private_key": pem.decode("ascii"),
        "client_email": SERVICE_ACCOUNT,
        "client_id": "112233445566778899000",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        **extra,
    }
    return json.dumps(data, indent=2)


def new_pem() -> bytes:
    """A fresh 2048-bit RSA key in PKCS#8 PEM."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class LocalGoogle:
    """The token endpoint at `/token` and the Gmail API under `/gmail/v1/` on one 127.0.0.1 port."""

    public_key: Any
    subject: str = SUBJECT
    url: str = ""
    claims: list[dict[str, Any]] = field(default_factory=list)  # every verified assertion's claims
    headers: list[dict[str, Any]] = field(default_factory=list)  # and its JOSE header
    token_answers: list[tuple[int, Any]] = field(default_factory=list)  # queued (status, JSON)
    send_answers: list[tuple[int, Any]] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    revoked: set[str] = field(default_factory=set)  # tokens the API answers 401 to
    presented: list[str] = field(default_factory=list)  # every token the API saw
    raw: list[bytes] = field(default_factory=list)  # every message the API accepted, decoded
    refused_raw: list[bytes] = field(default_factory=list)  # and those it refused
    sends: int = 0
    hold: asyncio.Event | None = None  # while set to an unset event, the API does not answer

    @property
    def token_uri(self) -> str:
        """Where the key file says tokens are asked."""
        return f"{self.url}/token"

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != JWT_BEARER:
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        assertion = str(form.get("assertion", ""))
        try:
            # The signature with the test key's public half, the audience, and that it has not expired.
            claims = jwt.decode(
                assertion,
                self.public_key,
                algorithms=["RS256"],
                audience=self.token_uri,
                options={"require": ["iss", "sub", "aud", "iat", "exp", "scope"]},
            )
        except jwt.InvalidTokenError as exc:
            return web.json_response({"error": "invalid_grant", "error_description": str(exc)}, status=400)
        self.claims.append(claims)
        self.headers.append(jwt.get_unverified_header(assertion))
        if self.token_answers:
            status, body = self.token_answers.pop(0)
            return web.json_response(body, status=status)
        if claims["iss"] != SERVICE_ACCOUNT or claims["scope"] != GMAIL_SEND_SCOPE:
            return web.json_response({"error": "invalid_scope"}, status=400)
        if claims["sub"] != self.subject:
            return web.json_response(
                {"error": "unauthorized_client", "error_description": "Client is unauthorized"}, status=401
            )
        token = f"ya29.access-{len(self.issued) + 1}-{secrets.token_hex(4)}"
        self.issued.append(token)
        return web.json_response({"access_token": token, "token_type": "Bearer", "expires_in": 3599})

    async def send(self, request: web.Request) -> web.Response:
        self.sends += 1
        if self.hold is not None:
            await self.hold.wait()
        authorization = request.headers.get("Authorization", "")
        token = authorization.removeprefix("Bearer ")
        self.presented.append(token)
        if token not in self.issued or token in self.revoked:
            return _google_error(401, "Request had invalid authentication credentials.", "UNAUTHENTICATED")
        body = await request.json()
        raw = base64.urlsafe_b64decode(body["raw"])
        if self.send_answers:
            status, answer = self.send_answers.pop(0)
            self.refused_raw.append(raw)
            return web.json_response(answer, status=status)
        self.raw.append(raw)
        return web.json_response({"id": f"18c{len(self.raw):013x}", "threadId": "18c0", "labelIds": ["SENT"]})


def google_error(status: int, message: str, state: str, reason: str | None = None) -> dict[str, Any]:
    """An error answer of a Google API, as Gmail writes them."""
    error: dict[str, Any] = {"code": status, "message": message, "status": state}
    if reason is not None:
        error["errors"] = [{"message": message, "domain": "usageLimits", "reason": reason}]
    return {"error": error}


def _google_error(status: int, message: str, state: str) -> web.Response:
    return web.json_response(google_error(status, message, state), status=status)


@asynccontextmanager
async def local_google(pem: bytes) -> AsyncIterator[LocalGoogle]:
    """Serve the token endpoint and the Gmail API for the service account key `pem` for the duration."""
    private = serialization.load_pem_private_key(pem, password=None)
    google = LocalGoogle(private.public_key())
    app = web.Application()
    app.router.add_post("/token", google.token)
    app.router.add_post("/gmail/v1/users/me/messages/send", google.send)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    google.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield google
    finally:
        await runner.cleanup()


def add_gmail_sender(
    db_url: str,
    secret_key: str,
    key_text: str,
    *,
    name: str = "workspace",
    subject: str = SUBJECT,
    dkim_key: bytes | None = None,
    daily_limit: int = 10_000,
) -> int:
    """A Gmail API sender account sending as `subject` with the service account key `key_text`."""
    dkim = {"dkim_domain": "example.org", "dkim_selector": "mail2026"} if dkim_key else {}
    spec = SenderSpec(
        name,
        subject,
        "gmail.googleapis.com",
        443,
        smtp_security="tls",
        auth_type="gmail",
        gmail_subject_email=subject,
        daily_limit=daily_limit,
        **dkim,  # type: ignore[arg-type]
    )
    with psycopg.connect(db_url) as conn:
        return add_sender(conn, spec, None, SecretBox(secret_key), dkim_key, gmail_key=key_text)
