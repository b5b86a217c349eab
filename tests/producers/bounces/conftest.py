"""Fixtures of the bounce tests: the bounce receiver on a free local port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_KEY
from worker.producers.bounces.receiver import BounceHandler, BounceServer, RateLimiter, database_processor


@pytest.fixture
async def bounce_receiver(db_url: str) -> AsyncIterator[BounceServer]:
    """The bounce receiver on a free local port."""
    handler = BounceHandler(
        database_processor(db_url, FIXTURE_KEY, BOUNCE_DOMAIN),
        frozenset({BOUNCE_DOMAIN}),
        RateLimiter(6000, 1000),
    )
    server = BounceServer(handler, "127.0.0.1", 0)
    await server.start()
    yield server
    await server.close()
