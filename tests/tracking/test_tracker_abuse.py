"""The tracker under abuse, over raw TCP from 127.0.0.0/8: slow and unfinished headers, idle keep-alive,
trickled bodies and one client holding many connections are all cut off within bounds."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest

from tests.fixtures_smtp import until_closed
from worker.core.config import Settings
from worker.tracking.listener import Listening, listen
from worker.tracking.server import make_app

BOUND = 10.0  # generous: every wait on the server is cut off here, never asserted as a duration
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@asynccontextmanager
async def tracker(db_url: str, settings: Settings, **limits: Any) -> AsyncIterator[Listening]:
    """The tracker as `mailroom tracker` serves it (its listener and limits), on a free port."""
    limited = replace(settings, **limits)
    listening = await listen(make_app(db_url, limited), limited, "127.0.0.1", 0)
    try:
        yield listening
    finally:
        await listening.close()


async def _connect(port: int, source: str = "127.0.0.1") -> Streams:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _get(streams: Streams, path: str) -> bytes:
    """The status line of a keep-alive GET on an open connection (its body read and dropped)."""
    reader, writer = streams
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t.example.org\r\n\r\n".encode())
    async with asyncio.timeout(BOUND):
        status = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        await reader.readexactly(length)
    return status.rstrip(b"\r\n")


async def test_a_request_head_that_never_finishes_is_closed_within_the_idle_timeout(
    db_url: str, settings: Settings
) -> None:
    async with tracker(db_url, settings, tracker_idle_timeout_seconds=0.5) as served:
        reader, writer = await _connect(served.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: t.example.org\r\n")  # and never the blank line
        assert await until_closed(reader) == b""
        writer.close()


async def test_headers_trickled_a_byte_at_a_time_do_not_hold_the_connection(
    db_url: str, settings: Settings
) -> None:
    async with tracker(db_url, settings, tracker_idle_timeout_seconds=0.5) as served:
        reader, writer = await _connect(served.port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")

        async def trickle() -> None:
            for byte in b"X-Slow: " + b"a" * 5000:  # a header that never ends, one byte every 50 ms
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)

        task = asyncio.create_task(trickle())
        try:
            assert await until_closed(reader) == b""
        finally:
            task.cancel()
            writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_its_answer(
    db_url: str, settings: Settings
) -> None:
    async with tracker(db_url, settings, tracker_idle_timeout_seconds=0.5) as served:
        streams = await _connect(served.port)
        assert await _get(streams, f"/o/{uuid.uuid4()}.gif") == b"HTTP/1.1 200 OK"
        assert await until_closed(streams[0]) == b""
        streams[1].close()


async def test_a_body_trickled_past_the_request_deadline_is_answered_408_and_closed(
    db_url: str, settings: Settings
) -> None:
    async with tracker(db_url, settings, tracker_request_timeout_seconds=0.5) as served:
        reader, writer = await _connect(served.port)
        writer.write(
            f"POST /u/{uuid.uuid4()} HTTP/1.1\r\nHost: t.example.org\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n"
            "List-Unsub".encode()  # ten bytes of a thousand, then nothing
        )
        answer = await until_closed(reader)
        assert answer.startswith(b"HTTP/1.1 408 ")
        writer.close()


async def test_a_client_over_its_connection_cap_is_answered_503_and_others_are_served(
    db_url: str, settings: Settings
) -> None:
    async with tracker(db_url, settings, tracker_max_connections_per_client=3) as served:
        held = [await _connect(served.port) for _ in range(3)]
        assert await _get(held[0], "/healthz") == b"HTTP/1.1 200 OK"
        reader, writer = await _connect(served.port)
        refusal = await until_closed(reader)
        assert refusal.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        writer.close()
        other = await _connect(served.port, "127.0.0.2")  # another client is not counted with the first
        assert await _get(other, "/healthz") == b"HTTP/1.1 200 OK"
        # one of the three leaves (the server closes it after its answer): the first client is served again
        held[2][1].write(b"GET /healthz HTTP/1.1\r\nHost: t.example.org\r\nConnection: close\r\n\r\n")
        assert (await until_closed(held[2][0])).startswith(b"HTTP/1.1 200 OK\r\n")
        again = await _connect(served.port)
        assert await _get(again, "/healthz") == b"HTTP/1.1 200 OK"
        for _, held_writer in [*held, other, again]:
            held_writer.close()


@pytest.mark.e2e
def test_mailroom_tracker_caps_connections_per_client_as_its_option_says(cli_env: dict[str, str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    argv = [
        sys.executable,
        "-m",
        "worker.cli.main",
        "tracker",
        "--port",
        str(port),
        "--max-connections-per-client",
        "1",
    ]
    with subprocess.Popen(
        argv, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stderr is not None
            for line in process.stderr:
                if "tracker listening" in line:
                    break
            with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as held:
                held.sendall(b"GET /healthz HTTP/1.1\r\nHost: t.example.org\r\n\r\n")
                assert held.recv(100).startswith(b"HTTP/1.1 200 OK")  # admitted, and held open (keep-alive)
                with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as second:
                    assert second.recv(100).startswith(b"HTTP/1.1 503 ")
        finally:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
    assert process.returncode == 0
