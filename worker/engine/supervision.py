"""Background tasks under supervision: restarted with backoff when they fail, fatal when they keep failing.

A worker must never go on sending while a task it relies on is dead (lease renewal above all): a
task that fails `max_failures` times within `window_seconds`, or raises `Fatal`, stops the worker
with a one-line reason instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

log = logging.getLogger("mailroom.worker")


class Fatal(Exception):
    """A failure after which the worker must stop (e.g. leases that can no longer be renewed)."""


class WorkerFailed(RuntimeError):
    """The worker stopped because something it relies on failed; the message says what."""


async def supervise(
    name: str,
    task: Callable[[], Awaitable[None]],
    on_fatal: Callable[[str], None],
    *,
    max_failures: int = 5,
    window_seconds: float = 60.0,
    first_delay: float = 0.5,
    max_delay: float = 30.0,
) -> None:
    """Run `task` until it returns or is cancelled, restarting it after a failure with a growing pause."""
    failures: deque[float] = deque()
    delay = first_delay
    while True:
        try:
            await task()
            return
        except Fatal as exc:
            on_fatal(f"{name}: {exc}")
            return
        except Exception as exc:  # any bug: logged, restarted, and fatal if it keeps happening
            now = time.monotonic()
            failures.append(now)
            while failures and failures[0] < now - window_seconds:
                failures.popleft()
            if len(failures) >= max_failures:
                on_fatal(f"{name} failed {len(failures)} times within {window_seconds:.0f}s (last: {exc})")
                return
            log.error("%s failed (%s); restarting in %.1fs", name, exc, delay, exc_info=exc)
            await asyncio.sleep(delay)
            delay = min(max_delay, delay * 2)
