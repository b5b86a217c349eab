"""Tracker requests per second: a flood of opens, clicks, unsubscribe pages and refusals on one local tracker.

    .venv/bin/python -m bench.tracker [REQUESTS] [CONCURRENCY]

Defaults: 10,000 requests from 64 concurrent clients, the five kinds of request in turn (a known open,
an unknown open, a click, an unsubscribe page, a click refused as not ours). The suite checks the same
flood's answers at a small size (tests/tracking/test_tracker.py); this measures its rate.
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import psycopg
from aiohttp.test_utils import TestServer
from psycopg.rows import dict_row

from bench.common import database
from worker.core.config import Settings
from worker.core.crypto import generate_key
from worker.core.outbox import EmailRequest, enqueue
from worker.tracking.server import make_app

HTML = '<html><body><a href="https://shop.example.com/sale">Sale</a></body></html>'
CLICK = re.compile(r'href="http://localhost:8025(/c/[0-9a-f-]{36})"')


def _paths(url: str, settings: Settings, requests: int) -> list[str]:
    """The request paths of the flood, the five kinds in turn, for one tracked campaign email."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        request = EmailRequest(to="reader@example.com", subject="News", html=HTML, text="Hi", campaign_id="b")
        email_id = enqueue(conn, request, settings=settings)
        row = conn.execute("SELECT * FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
    assert row is not None
    kinds = [
        f"/o/{row['tracking_token']}.gif",
        f"/o/{uuid.uuid4()}.gif",
        CLICK.findall(row["html_body"])[0],
        f"/u/{row['unsubscribe_token']}",
        f"/c/{uuid.uuid4()}?url=javascript:alert(1)",
    ]
    return [kinds[i % len(kinds)] for i in range(requests)]


async def _flood(url: str, settings: Settings, paths: list[str], concurrency: int) -> float:
    """Send every path from `concurrency` clients; the seconds it took."""
    server = TestServer(make_app(url, settings, pool_size=8, pool_timeout=5.0))
    await server.start_server()
    queue = iter(paths)
    try:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as http:

            async def client() -> None:
                for path in queue:
                    async with http.get(server.make_url(path), allow_redirects=False) as resp:
                        await resp.read()

            started = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(concurrency)))
            return time.perf_counter() - started
    finally:
        await server.close()


def main() -> None:
    """Run the flood once and print its rate."""
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    with database() as url, tempfile.TemporaryDirectory(prefix="mailroom-bench-") as home:
        settings = Settings(home=Path(home), database_url=url, secret_key=generate_key())
        paths = _paths(url, settings, requests)
        elapsed = asyncio.run(_flood(url, settings, paths, concurrency))
    print(
        f"{requests:,} tracker requests in {elapsed:.2f} s ({requests / elapsed:,.0f}/s, {concurrency} clients)"
    )


if __name__ == "__main__":
    main()
