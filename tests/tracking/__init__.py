"""Tests of open and click tracking, one-click unsubscribe, DKIM and campaign stats; shared helpers below."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import psycopg
from aiohttp.test_utils import TestServer

from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.tracking.server import make_app

CAMPAIGN_HTML = (
    "<html><body><p>Hello</p>"
    '<a href="https://shop.example.com/sale?a=1&amp;b=2">Sale</a> '
    "<a class='x' href='http://example.org/blog'>Blog</a> "
    '<a href="javascript:alert(1)">js</a> <a href="mailto:help@example.com">mail</a> '
    '<a href="/relative">rel</a> <a href="#top">top</a>'
    "</body></html>"
)


def https(settings: Settings) -> Settings:
    """The settings with a public HTTPS base URL, as in production (RFC 8058 needs one)."""
    return replace(settings, base_url="https://t.example.org")


def enqueue_one(db_url: str, settings: Settings, **fields: Any) -> int:
    """Enqueue one email (a tracked campaign email unless told otherwise), committed; return its id."""
    values: dict[str, Any] = {
        "to": "Reader@Example.com",
        "subject": "News",
        "html": CAMPAIGN_HTML,
        "text": "Hello",
        "campaign_id": "spring",
    }
    values.update(fields)
    with psycopg.connect(db_url) as conn:
        return enqueue(conn, EmailRequest(**values), settings=settings)


def email_row(db_url: str, email_id: int) -> dict[str, Any]:
    """The stored email."""
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        row = conn.execute("SELECT * FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
    assert row is not None
    return row


def scalar(db_url: str, query: str, *params: Any) -> Any:
    """One value from the database."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(query, params).fetchone()
    return row[0] if row else None


@asynccontextmanager
async def running_tracker(
    db_url: str, settings: Settings, pool_timeout: float = 5.0
) -> AsyncIterator[TestServer]:
    """The tracker application served on a real local port."""
    server = TestServer(make_app(db_url, settings, pool_size=8, pool_timeout=pool_timeout))
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()
