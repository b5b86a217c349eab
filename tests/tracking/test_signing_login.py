"""The signing page with an OpenID Connect login required: the right person signs with their subject, no one else."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import aiohttp
from aiohttp.test_utils import TestServer

from tests.tracking.oidc_server import CLIENT_ID, CLIENT_SECRET, Issuer, running_issuer
from tests.tracking.signing_helpers import form_fields, make_document, signature_rows, token_for
from worker.core.config import Settings
from worker.core.rate_limit import RateLimiter
from worker.producers.documents.desk import DocumentDesk
from worker.tracking.server import make_app

ADA = "ada@example.com"


@asynccontextmanager
async def _login_world(
    db_url: str, settings: Settings, idp: Issuer
) -> AsyncIterator[tuple[TestServer, aiohttp.ClientSession]]:
    """The public server with login configured against `idp`, and a browser keeping cookies."""
    async with running_issuer(idp):
        configured = dataclasses.replace(
            settings, oidc_issuer=idp.issuer, oidc_client_id=CLIENT_ID, oidc_client_secret=CLIENT_SECRET
        )
        desk = DocumentDesk(db_url, configured, limiter=RateLimiter(per_minute=6000, burst=1000))
        server = TestServer(make_app(db_url, configured, pool_size=4, signing=desk), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
                yield server, http
        finally:
            await server.close()


async def _follow(server: TestServer, http: aiohttp.ClientSession, path: str) -> tuple[int, str]:
    """GET `path` and follow redirects by hand (the public base URL comes back to the test server)."""
    url = str(server.make_url(path))
    for _ in range(8):
        async with http.get(url, allow_redirects=False) as resp:
            text = await resp.text()
            if resp.status not in (302, 303):
                return resp.status, text
            location = resp.headers["Location"]
        parts = urlsplit(location)
        if not parts.netloc or parts.netloc == "localhost:8025":
            url = str(server.make_url(parts.path + ("?" + parts.query if parts.query else "")))
        else:
            url = location
    raise AssertionError("too many redirects")


async def test_the_expected_person_logs_in_and_signs_with_their_subject(
    db_url: str, settings: Settings
) -> None:
    make_document(db_url, settings, require_login=True)
    token = token_for(db_url, settings, "policy", ADA)
    async with _login_world(db_url, settings, Issuer()) as (server, http):
        status, page = await _follow(server, http, f"/s/{token}")
        assert status == 200 and "Sign in to sign" in page and 'name="consent"' not in page
        link = re.search(r'href="([^"/]+/login)"', page)
        assert link is not None
        status, page = await _follow(server, http, f"/s/{link.group(1)}")  # through the issuer and back
        assert status == 200 and 'name="consent"' in page, page
        data = {**form_fields(page), "consent": "yes"}
        async with http.post(server.make_url(f"/s/{token}"), data=data) as resp:
            assert resp.status == 200, await resp.text()
    [row] = signature_rows(db_url)
    assert row["signer_email"] == ADA and row["user_sub"] == "user-1234"


async def test_a_login_as_someone_else_signs_nothing(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings, require_login=True)
    token = token_for(db_url, settings, "policy", ADA)
    async with _login_world(db_url, settings, Issuer(sub="eve-1", email="eve@example.com")) as (server, http):
        await _follow(server, http, f"/s/{token}/login")
        status, page = await _follow(server, http, f"/s/{token}")
        assert status == 200 and 'name="consent"' not in page
        # Posting anyway signs nothing.
        async with http.post(server.make_url(f"/s/{token}"), data={"consent": "yes"}) as resp:
            assert resp.status == 403
    assert signature_rows(db_url) == []
