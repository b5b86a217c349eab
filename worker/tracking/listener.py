"""How the tracker listens: bounded time per connection and per request, bounded connections per client.

aiohttp alone keeps a connection whose request head never completes for its keep-alive timeout
(about an hour by default), has no cap on one client's connections, and waits for a body as long
as its sender trickles it. Here the keep-alive timeout (armed when a connection opens, and again
after each answer) bounds both slow headers and idle keep-alive; a deadline bounds each request,
its body included; and a `ConnectionGate` answers a client network over its cap `503` at connect.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from worker.core.config import Settings
from worker.core.connection_gate import ConnectionGate

log = logging.getLogger("mailroom.tracker")

_TOO_MANY = b"too many connections\n"
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 10\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_TOO_MANY), _TOO_MANY)
)
# After an answer sent before its request's body was all read (a deadline, a 413), the rest of
# the body is read and thrown away this long at most, so the client can still read the answer.
LINGER_SECONDS = 2.0


def request_deadline(seconds: float) -> Middleware:
    """Middleware: a request (reading its body included) that takes longer than `seconds` is answered 408."""

    @web.middleware
    async def deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        timer = asyncio.timeout(seconds)
        try:
            async with timer:
                return await handler(request)
        except TimeoutError:
            if not timer.expired():
                raise  # not ours: someone else's timeout, theirs to answer
        log.warning("%s %s: over the %.0f s request deadline", request.method, request.path, seconds)
        response = web.Response(text="request took too long\n", status=408)
        response.force_close()
        return response

    return deadline


@dataclass
class Listening:
    """A tracker application served on a port; `close` stops it."""

    runner: web.AppRunner
    server: asyncio.Server
    gate: ConnectionGate
    port: int

    async def close(self) -> None:
        """Stop listening, close the connections and clean the application up."""
        self.server.close()
        await self.runner.cleanup()
        await self.server.wait_closed()


async def listen(app: web.Application, settings: Settings, host: str, port: int) -> Listening:
    """Serve `app` on host:port (0 picks a free port) with the tracker's limits from `settings`."""
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=settings.tracker_idle_timeout_seconds,
        lingering_time=LINGER_SECONDS,
    )
    await runner.setup()
    gate = ConnectionGate(settings.tracker_max_connections_per_client, REFUSED)
    handlers = runner.server
    assert handlers is not None  # set up just above
    try:
        server = await asyncio.get_running_loop().create_server(
            gate.protocol(handlers), host, port, reuse_address=True
        )
    except BaseException:
        await runner.cleanup()
        raise
    return Listening(runner, server, gate, int(server.sockets[0].getsockname()[1]))
