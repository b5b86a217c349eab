"""Pytest plugin: real SMTP sinks (worker.devtools.sink) on 127.0.0.1 with free ports, stopped after each test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from os import PathLike
from typing import Protocol

import pytest

from worker.devtools.sink import RefuseShare, RunningSink, SinkHandler, start_sink


class SinkFactory(Protocol):
    """Starts a sink with options; every sink it started is stopped when the test ends."""

    def __call__(
        self,
        *,
        maildir: str | PathLike[str] | None = None,
        auth: tuple[str, str] | None = None,
        refuse_share: RefuseShare | None = None,
        handler: SinkHandler | None = None,
        keep: int | None = None,
    ) -> RunningSink: ...


@pytest.fixture
def smtp_sink_factory() -> Iterator[SinkFactory]:
    """Start any number of sinks, e.g. ``smtp_sink_factory(auth=("user", "secret"), maildir=tmp_path)``."""
    started: list[RunningSink] = []

    def factory(
        *,
        maildir: str | PathLike[str] | None = None,
        auth: tuple[str, str] | None = None,
        refuse_share: RefuseShare | None = None,
        handler: SinkHandler | None = None,
        keep: int | None = None,
    ) -> RunningSink:
        sink = start_sink(
            "127.0.0.1", 0, maildir, auth=auth, refuse_share=refuse_share, handler=handler, keep=keep
        )
        started.append(sink)
        return sink

    yield factory
    for sink in reversed(started):
        sink.stop()


@pytest.fixture
def smtp_sink(smtp_sink_factory: SinkFactory) -> RunningSink:
    """A fresh sink accepting everything on 127.0.0.1; ``smtp_sink.port`` is where to connect."""
    return smtp_sink_factory()


async def until_closed(reader: asyncio.StreamReader, bound: float = 10.0) -> bytes:
    """Everything a server still sends until it closes the connection; fails past `bound` seconds
    (generous: a wait cut off, never a duration asserted). A reset is a close too: a server that
    hangs up on a client still sending (bytes left unread) makes its kernel answer with RST, not FIN."""
    seen = b""
    async with asyncio.timeout(bound):
        try:
            while chunk := await reader.read(4096):
                seen += chunk
        except ConnectionResetError:
            pass
    return seen
