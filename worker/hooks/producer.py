"""The webhook dispatcher as one of the worker's producers, loaded only once an endpoint exists: a
worker of a database without endpoints never imports the HTTP client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from worker.core.config import Settings
from worker.engine.producer import Producer

if TYPE_CHECKING:
    from worker.hooks.dispatch import Dispatcher

CHANNEL = "mailroom_webhooks"
ANY_ENDPOINT = "SELECT EXISTS (SELECT FROM mailroom.webhook_endpoints)"


class LazyDispatcher:
    """Asks whether any endpoint exists until one does, then hands every round to the dispatcher."""

    def __init__(self) -> None:
        self.dispatcher: Dispatcher | None = None

    async def run_once(self, conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
        """A round of the dispatcher, once there is an endpoint; nothing before."""
        if self.dispatcher is None:
            row = await (await conn.execute(ANY_ENDPOINT)).fetchone()
            await conn.rollback()
            if not (row and row[0]):
                return 0
            from worker.hooks.dispatch import Dispatcher

            self.dispatcher = Dispatcher()
        return await self.dispatcher.run_once(conn, settings)

    async def close(self) -> None:
        """Let the dispatcher's POSTs and sessions go."""
        if self.dispatcher is not None:
            await self.dispatcher.close()


def producer(interval_seconds: float = 2.0) -> Producer:
    """A fresh dispatcher for one worker process (it holds that process's POSTs in flight); it looks for
    due retries every `interval_seconds`, and is woken at once by new events."""
    lazy = LazyDispatcher()
    return Producer(
        "webhooks", lazy.run_once, channels=(CHANNEL,), interval_seconds=interval_seconds, close=lazy.close
    )
