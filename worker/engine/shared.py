"""One read of the database that the tasks asking for it together share (`Shared`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Shared(Generic[T]):
    """The latest read of something every slot asks for (the eligible senders; whether a drain is
    done): a caller joins the read under way when that read began at or after `since`, the moment
    from which the caller needs an answer (so the shared answer is one it could have read itself),
    and starts a new one otherwise. A finished read is never handed out again."""

    def __init__(self) -> None:
        self._current: tuple[float, asyncio.Task[T]] | None = None

    async def get(self, read: Callable[[], Awaitable[T]], *, since: float) -> T:
        """`read()`'s answer, from a read that began at or after `since` (on `time.monotonic`)."""
        current = self._current
        if current is None or current[1].done() or current[0] < since:
            task = asyncio.ensure_future(read())
            task.add_done_callback(_retrieved)  # its error is its waiters' (if any are left)
            current = self._current = (time.monotonic(), task)
        # Shielded: a caller cancelled while it waits must not cancel the read the others wait for.
        return await asyncio.shield(current[1])


def _retrieved(task: asyncio.Future[T]) -> None:
    """Mark a shared read's error as seen: every caller that waited for it has it already."""
    if not task.cancelled():
        task.exception()
