"""Helpers for the signing page's tests: a document with signers, links, the page served, its form read."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import aiohttp
import psycopg
from aiohttp.test_utils import TestServer

from worker.core.config import Settings
from worker.core.rate_limit import RateLimiter
from worker.producers.documents.desk import DocumentDesk
from worker.producers.documents.records import add_document, expect_signer
from worker.producers.documents.signing_links import link_key, make_token
from worker.tracking.server import make_app

CHECKSUM = "a" * 64
NEW_CHECKSUM = "b" * 64
_FIELD = re.compile(r'<input type="hidden" name="(csrf|referer)" value="([^"]*)">')


def make_document(
    db_url: str,
    settings: Settings,
    doc_id: str = "policy",
    *,
    title: str = "Security policy",
    signers: tuple[tuple[str, str, str], ...] = (("ada@example.com", "Ada Lovelace", "en"),),
    checksum: str | None = CHECKSUM,
    require_login: bool = False,
) -> None:
    """Add a document and its expected signers (address, name, locale), committed."""
    with psycopg.connect(db_url) as conn:
        add_document(
            conn,
            doc_id,
            title=title,
            url="https://docs.example.com/policy.pdf",
            checksum=checksum,
            checksum_algorithm="SHA-256" if checksum else None,
        )
        for email, name, locale in signers:
            expect_signer(conn, doc_id, email, name=name, locale=locale, settings=settings)
        if require_login:
            conn.execute("UPDATE mailroom.documents SET require_login = true WHERE doc_id = %s", (doc_id,))


def token_for(
    db_url: str, settings: Settings, doc_id: str, email: str, expires_at: datetime | None = None
) -> str:
    """The token of an expected signer's link (valid for a day unless told otherwise)."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT e.id, d.checksum FROM mailroom.expected_signers e JOIN mailroom.documents d USING (doc_id)"
            " WHERE e.doc_id = %s AND e.email = %s",
            (doc_id, email),
        ).fetchone()
    assert row is not None
    expires = expires_at or datetime.fromtimestamp(datetime.now(UTC).timestamp() + 86400, UTC)
    return make_token(link_key(settings), int(row[0]), doc_id, email, row[1], expires)


@asynccontextmanager
async def signing_server(
    db_url: str,
    settings: Settings,
    *,
    clock: Callable[[], datetime] | None = None,
    limiter: RateLimiter | None = None,
) -> AsyncIterator[TestServer]:
    """The public server with the signing page, on a real local port."""
    kwargs: dict[str, Any] = {"limiter": limiter or RateLimiter(per_minute=6000, burst=1000)}
    if clock is not None:
        kwargs["clock"] = clock
    desk = DocumentDesk(db_url, settings, **kwargs)
    server = TestServer(make_app(db_url, settings, pool_size=4, signing=desk))
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


def form_fields(page: str) -> dict[str, str]:
    """The hidden fields of the consent form (csrf, referer), unescaped."""
    return {name: html.unescape(value) for name, value in _FIELD.findall(page)}


async def open_and_sign(
    http: aiohttp.ClientSession, server: TestServer, token: str, **headers: str
) -> tuple[aiohttp.ClientResponse, str]:
    """GET the page, then POST its form with the box ticked; the POST's response and body."""
    async with http.get(server.make_url(f"/s/{token}"), headers=headers) as page:
        assert page.status == 200, await page.text()
        fields = form_fields(await page.text())
    body = {**fields, "consent": "yes"}
    async with http.post(server.make_url(f"/s/{token}"), data=body, headers=headers) as resp:
        return resp, await resp.text()


def signature_rows(db_url: str, doc_id: str = "policy") -> list[dict[str, Any]]:
    """The document's stored signatures, with how each was proven."""
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(
            "SELECT id, signer_email, user_sub, referer, host(ip_address) AS ip, user_agent, payload_hash, seq"
            " FROM mailroom.signatures WHERE doc_id = %s ORDER BY id",
            (doc_id,),
        ).fetchall()


def browser() -> aiohttp.ClientSession:
    """A client that keeps cookies as a browser does (aiohttp's default jar drops those of an IP address)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
