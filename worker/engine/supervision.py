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
from typing import Any

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


async def supervise_slots(
    slots: list[asyncio.Task[None]],
    stopping: asyncio.Event,
    stop: Callable[[], None],
    wake: Callable[[], None],
    grace_seconds: float,
) -> None:
    """Wait for the delivery slots to end (drained) or for a stop; a failed slot stops the worker.

    On a stop, in-flight sends get the grace period, then whatever is left is cancelled; a slot's
    failure is raised once every slot has ended."""
    stop_wait = asyncio.create_task(stopping.wait())
    try:
        running: set[asyncio.Task[Any]] = set(slots)
        failure: BaseException | None = None
        while running and not stopping.is_set():
            done, _ = await asyncio.wait(running | {stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            running -= done
            failed = [t for t in done if t is not stop_wait and t.exception() is not None]
            if failed:
                failure = failed[0].exception()
                log.error("a delivery slot failed (%s); stopping this worker", failure)
                stop()
        if running:
            wake()
            _, late = await asyncio.wait(running, timeout=grace_seconds)
            for task in late:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        if failure is not None:
            raise failure
    finally:
        stop_wait.cancel()
