"""A local OAuth2 token endpoint and an SMTP server that checks AUTH XOAUTH2, for the OAuth2 sender tests."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from aiohttp import web
from aiosmtpd.smtp import SMTP, AuthResult

from worker.core.crypto import SecretBox
from worker.devtools.sink import SinkHandler
from worker.ops.sender_auth import OAuthSecrets
from worker.ops.senders import SenderSpec, add_sender

MAILBOX = "mailer@example.org"
CLIENT_ID = "1234-test.apps.example"
CLIENT_SECRET = "client-secret-Zq81"
REFRESH_TOKEN = "refresh-token-Kx42"
# What Gmail answers to a refused XOAUTH2 string, after its 334 error challenge and the client's empty line.
REFUSAL = "535 5.7.8 Username and Password not accepted. Learn more at https://support.example/mail"


class XOAuth2Handler(SinkHandler):
    """A sink that offers AUTH XOAUTH2 and accepts only the tokens the endpoint issued and not revoked."""

    def __init__(self, mailbox: str = MAILBOX) -> None:
        # Credentials no client knows: the sink then requires AUTH before MAIL (and offers PLAIN/LOGIN too).
        super().__init__(auth=(mailbox, secrets.token_hex(16)))
        self.mailbox = mailbox
        self.valid: set[str] = set()
        self.presented: list[str] = []  # every token presented, in order
        self.empty_replies = 0  # empty lines answering an error challenge, as the protocol asks

    async def auth_XOAUTH2(self, server: SMTP, args: list[str]) -> AuthResult:
        """RFC-less but documented (Google, Microsoft): base64 of user=...^Aauth=Bearer ...^A^A."""
        if len(args) < 2:
            return AuthResult(success=False, handled=False, message="501 5.5.2 initial response required")
        fields = base64.b64decode(args[1]).split(b"\x01")
        user = fields[0].removeprefix(b"user=").decode()
        token = fields[1].removeprefix(b"auth=Bearer ").decode() if len(fields) > 1 else ""
        self.presented.append(token)
        if user == self.mailbox and token in self.valid and fields[2:] == [b"", b""]:
            return AuthResult(success=True, handled=False, auth_data=user)
        challenge = json.dumps({"status": "401", "schemes": "Bearer", "scope": "https://mail.google.com/"})
        answer = await server.challenge_auth(challenge)
        if answer == b"":
            self.empty_replies += 1
        return AuthResult(success=False, handled=False, message=REFUSAL)


@dataclass
class TokenEndpoint:
    """An OAuth2 token endpoint on 127.0.0.1: counts requests, issues tokens the SMTP server will accept,
    or answers what a test queued (an error, a rotated refresh token, nonsense)."""

    smtp: XOAuth2Handler | None = None
    url: str = ""
    requests: list[dict[str, str]] = field(default_factory=list)
    answers: list[tuple[int, Any]] = field(default_factory=list)  # queued (status, JSON or raw bytes)
    expires_in: int = 3600
    rotate_to: str | None = None  # a new refresh token to hand out with the next token
    refused: int = 0  # how many of the first tokens issued the SMTP server refuses (as if revoked)
    issued: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.requests.append({k: str(v) for k, v in form.items()})
        if self.answers:
            status, body = self.answers.pop(0)
            if isinstance(body, bytes):
                return web.Response(status=status, body=body, content_type="text/plain")
            return web.json_response(body, status=status)
        token = f"access-{len(self.issued) + 1}-{secrets.token_hex(4)}"
        self.issued.append(token)
        if self.smtp is not None and len(self.issued) > self.refused:
            self.smtp.valid.add(token)
        body = {"access_token": token, "token_type": "Bearer", "expires_in": self.expires_in}
        if self.rotate_to is not None:
            body["refresh_token"], self.rotate_to = self.rotate_to, None
        return web.json_response(body)


@asynccontextmanager
async def token_endpoint(smtp: XOAuth2Handler | None = None) -> AsyncIterator[TokenEndpoint]:
    """Serve a token endpoint at `/token` on a free port for the duration."""
    endpoint = TokenEndpoint(smtp)
    app = web.Application()
    app.router.add_post("/token", endpoint.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    endpoint.url = f"http://127.0.0.1:{port}/token"
    try:
        yield endpoint
    finally:
        await runner.cleanup()


def add_oauth_sender(db_url: str, key: str, port: int, token_url: str, *, name: str = "gmail") -> int:
    """An oauth2 sender account logging in as MAILBOX on the local SMTP server."""
    spec = SenderSpec(
        name,
        MAILBOX,
        "127.0.0.1",
        port,
        smtp_security="none",
        smtp_username=MAILBOX,
        auth_type="oauth2",
        oauth_token_url=token_url,
        oauth_client_id=CLIENT_ID,
    )
    with psycopg.connect(db_url) as conn:
        return add_sender(conn, spec, None, SecretBox(key), oauth=OAuthSecrets(CLIENT_SECRET, REFRESH_TOKEN))
