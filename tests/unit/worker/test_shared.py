"""`worker.engine.shared.Shared`: one read for the tasks asking together, never an answer older than asked."""

from __future__ import annotations

import asyncio
import time

import pytest

from worker.engine.shared import Shared


class Reads:
    """A read that waits until released and counts how often it began."""

    def __init__(self) -> None:
        self.began = 0
        self.release = asyncio.Event()

    async def read(self) -> int:
        self.began += 1
        answer = self.began
        await self.release.wait()
        return answer


async def test_callers_asking_together_share_one_read() -> None:
    shared: Shared[int] = Shared()
    reads = Reads()
    since = time.monotonic()
    waiting = [asyncio.create_task(shared.get(reads.read, since=since)) for _ in range(4)]
    await asyncio.sleep(0)
    reads.release.set()
    assert await asyncio.gather(*waiting) == [1, 1, 1, 1]
    assert reads.began == 1


async def test_a_caller_that_needs_a_newer_answer_starts_its_own_read() -> None:
    shared: Shared[int] = Shared()
    reads = Reads()
    first = asyncio.create_task(shared.get(reads.read, since=time.monotonic()))
    await asyncio.sleep(0)
    later = asyncio.create_task(shared.get(reads.read, since=time.monotonic()))  # after the first began
    await asyncio.sleep(0)
    reads.release.set()
    assert (await first, await later) == (1, 2)


async def test_a_finished_read_is_not_handed_out_again() -> None:
    shared: Shared[int] = Shared()
    reads = Reads()
    reads.release.set()
    since = time.monotonic()
    assert await shared.get(reads.read, since=since) == 1
    assert await shared.get(reads.read, since=since) == 2


async def test_a_cancelled_caller_leaves_the_read_to_the_others() -> None:
    shared: Shared[int] = Shared()
    reads = Reads()
    since = time.monotonic()
    leaving = asyncio.create_task(shared.get(reads.read, since=since))
    staying = asyncio.create_task(shared.get(reads.read, since=since))
    await asyncio.sleep(0)
    leaving.cancel()
    reads.release.set()
    assert await staying == 1
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_every_caller_gets_the_reads_error() -> None:
    shared: Shared[int] = Shared()

    async def fails() -> int:
        await asyncio.sleep(0)
        raise OSError("the database went away")

    since = time.monotonic()
    results = await asyncio.gather(
        *(shared.get(fails, since=since) for _ in range(3)), return_exceptions=True
    )
    assert [type(r) for r in results] == [OSError, OSError, OSError]
