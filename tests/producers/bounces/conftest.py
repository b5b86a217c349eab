"""Fixtures of the bounce tests: bounce receivers on free local ports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_KEY
from tests.producers.bounces.receivers import Clock, ReceiverFactory
from worker.producers.bounces.receiver import (
    BounceHandler,
    BounceServer,
    RateLimiter,
    ReceiverLimits,
    database_processor,
)


@pytest.fixture
async def receiver(db_url: str) -> AsyncIterator[ReceiverFactory]:
    """Start receivers on free ports (database, size, rate with a clock the test moves, the global
    bounce domain, `ReceiverLimits` fields as keywords); all closed at the end."""
    servers: list[BounceServer] = []

    async def start(
        *,
        url: str | None = None,
        max_bytes: int = 1024 * 1024,
        per_minute: float = 600,
        burst: int = 100,
        clock: Clock | None = None,
        clients: int = 10_000,
        bounce_domain: str | None = None,
        **limits: Any,
    ) -> BounceServer:
        handler = BounceHandler(
            database_processor(url or db_url, FIXTURE_KEY, bounce_domain),
            frozenset({BOUNCE_DOMAIN}),
            RateLimiter(per_minute, burst, clock or Clock(), clients=clients),
        )
        server = BounceServer(handler, "127.0.0.1", 0, max_bytes=max_bytes, limits=ReceiverLimits(**limits))
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()
