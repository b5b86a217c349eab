"""The metrics listener's HTTP: one request per connection (HTTP/1.0), within limits no client can outlast.

A request head is collected on an event loop of the listener's own thread, where a client sending
it a byte at a time costs a socket and a few bytes, not a thread; the head must be whole within
`Limits.head_seconds` of the connection's accept, however it trickles. A whole head is then
answered on a small thread pool by the standard library's `BaseHTTPRequestHandler` (given the head,
writing into a buffer), the probe paths on threads of their own so a scrape never queues a probe.
Connections are capped per client network and in all; a connection over a cap takes the place of
the oldest one still sending its head (see `_Connections`), so slow clients can hold connections
but never shut out a probe. Nothing here knows what is served: `worker.ops.metrics_server` does.
"""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

from worker.core.connection_gate import peer_key

log = logging.getLogger(__name__)

# A head arrives in one packet from Prometheus, curl or an orchestrator; these leave room to spare.
HEAD_SECONDS = 10.0
MAX_HEAD = 16 * 1024
MAX_PER_CLIENT = 8
MAX_CONNECTIONS = 256
MAX_REQUESTS = 8
URGENT_THREADS = 2

Respond = Callable[[bytes, Any], bytes]


class _Exchange:
    """One request's head in, its answer out: what the handler reads and writes instead of a socket."""

    def __init__(self, head: bytes) -> None:
        self.head = io.BytesIO(head)
        self.answer = io.BytesIO()


def responder(handler: type[BaseHTTPRequestHandler]) -> Respond:
    """The answer `handler` gives to a whole request head from `client` (HTTP/1.0: one request, then close)."""

    def respond(head: bytes, client: Any) -> bytes:
        exchange = _Exchange(head)
        handler(cast(Any, exchange), client, cast(Any, None))  # answers in its constructor, no server
        return exchange.answer.getvalue()

    return respond


@dataclass(frozen=True)
class Limits:
    """What clients of the listener may hold, so that a probe is answered whoever trickles or floods."""

    # A request head must be whole this long after its connection is accepted (not per read: a byte
    # every few seconds does not stretch it), and an answer sent within as long again.
    head_seconds: float = HEAD_SECONDS
    # Connections open at once from one client network (`worker.core.connection_gate.client_key`).
    per_client: int = MAX_PER_CLIENT
    # Connections open at once in all (each costs a file descriptor and a little memory, no thread).
    connections: int = MAX_CONNECTIONS
    # Requests answered at once; the urgent paths (the probes) have URGENT_THREADS more of their own.
    requests: int = MAX_REQUESTS


@dataclass(eq=False)
class _Connection:
    """An open connection: whose it is, and whether its head is still coming (then it may be evicted)."""

    client: str
    writer: asyncio.StreamWriter
    reading: bool = True


class _Connections:
    """The open connections, oldest first, within `Limits`.

    A connection over a cap does not wait and does not shut anyone out: it takes the place of the
    oldest connection (of its client, or of anyone for the total cap) whose head is still coming.
    A head that is whole arrives in one packet, so the connection evicted is a slow one; only when
    every connection over the cap is being answered is the new one closed.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open: dict[_Connection, None] = {}  # ordered: the oldest first
        self.held: dict[str, int] = {}
        self.evicted = 0

    def admit(self, conn: _Connection) -> bool:
        """Count `conn` in, evicting a slow connection when a cap is reached; False when it cannot be."""
        if self.held.get(conn.client, 0) >= self.limits.per_client and not self._evict(conn.client):
            return False
        if len(self.open) >= self.limits.connections and not self._evict(None):
            return False
        self.open[conn] = None
        self.held[conn.client] = self.held.get(conn.client, 0) + 1
        return True

    def leave(self, conn: _Connection) -> None:
        """Count `conn` out (again is harmless)."""
        if conn not in self.open:
            return
        del self.open[conn]
        left = self.held[conn.client] - 1
        if left:
            self.held[conn.client] = left
        else:
            del self.held[conn.client]

    def close_all(self) -> None:
        """Abort every open connection (the listener stops)."""
        for conn in list(self.open):
            self.leave(conn)
            conn.writer.transport.abort()

    def _evict(self, client: str | None) -> bool:
        for old in self.open:
            if old.reading and (client is None or old.client == client):
                self.leave(old)
                old.writer.transport.abort()
                self.evicted += 1
                log.debug("metrics listener: a slow connection of %s closed to make room", old.client)
                return True
        return False


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    """The request head through its blank line; None when the client closes first or sends too much."""
    head = bytearray()
    while True:
        chunk = await reader.read(4096)
        if not chunk:
            return None
        seen = max(0, len(head) - 3)
        head += chunk
        if head.find(b"\r\n\r\n", seen) >= 0 or head.find(b"\n\n", seen) >= 0:
            return bytes(head)
        if len(head) > MAX_HEAD:
            return None


def _path(head: bytes) -> bytes:
    """The path a head asks for, without its query (b"" for a head that names none)."""
    parts = head.split(b" ", 2)
    return parts[1].split(b"?", 1)[0] if len(parts) > 1 else b""


class Listener:
    """Serves `respond`'s answers on a bound socket from a thread of its own until `close`; the paths
    in `urgent` (the probes) are answered on threads of their own."""

    def __init__(
        self, sock: socket.socket, respond: Respond, limits: Limits, urgent: frozenset[bytes]
    ) -> None:
        self.sock, self.respond, self.limits, self.urgent = sock, respond, limits, urgent
        self.connections = _Connections(limits)
        self._pool = ThreadPoolExecutor(limits.requests, thread_name_prefix="metrics")
        self._probes = ThreadPoolExecutor(URGENT_THREADS, thread_name_prefix="metrics-probe")
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="metrics", daemon=True)

    @property
    def port(self) -> int:
        """The port bound."""
        return int(self.sock.getsockname()[1])

    def start(self) -> None:
        """Serve on the thread until `close`."""
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the metrics listener did not start")
        if self._failed is not None:
            raise self._failed

    def close(self) -> None:
        """Stop listening, close every connection and wait for the thread."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._probes.shutdown(wait=False, cancel_futures=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self._failed = exc
            log.exception("metrics listener: stopped")
        finally:
            self._ready.set()
            self.sock.close()

    async def _run(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._serve, sock=self.sock)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            self.connections.close_all()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(peer_key(writer.transport), writer)
        if not self.connections.admit(conn):
            writer.transport.abort()
            return
        answered = False
        try:
            head = await asyncio.wait_for(_read_head(reader), self.limits.head_seconds)
            if head is None:
                return
            conn.reading = False
            pool = self._probes if _path(head) in self.urgent else self._pool
            peer = writer.get_extra_info("peername")
            answer = await asyncio.get_running_loop().run_in_executor(pool, self.respond, head, peer)
            writer.transport.set_write_buffer_limits(high=0)  # drain then waits for every byte
            writer.write(answer)
            writer.write_eof()
            await asyncio.wait_for(writer.drain(), self.limits.head_seconds)
            answered = True
        except (TimeoutError, ConnectionError):
            pass  # too slow, or gone: closed below
        except Exception:
            log.exception("metrics listener: a request failed")
        finally:
            self.connections.leave(conn)
            if answered:
                writer.close()
            else:
                writer.transport.abort()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket for IPv4 or IPv6 (a host with a colon), bound here so a busy port fails at once."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock
