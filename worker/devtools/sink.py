"""A local SMTP server that catches mail (like MailPit): for ``mailroom sink``, demos and the test suite."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from os import PathLike
from types import TracebackType
from typing import Any, Final

from aiosmtpd.smtp import SMTP

from worker.core.plaintext import LOOPBACK_HOSTS
from worker.devtools.sink_handler import (
    ReceivedMessage,
    SinkHandler,
)
from worker.devtools.sink_script import (
    ACCEPT,
    DEFAULT_WAIT_TIMEOUT,
    Accept,
    Action,
    ActionLike,
    Drop,
    Matcher,
    RefuseShare,
    Reply,
    Rule,
    Script,
    Stall,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ACCEPT",
    "Accept",
    "Action",
    "Drop",
    "ReceivedMessage",
    "RefuseShare",
    "Reply",
    "Rule",
    "RunningSink",
    "Script",
    "SinkHandler",
    "Stall",
    "serve_forever",
    "start_sink",
]

CLI_KEEP: Final = 1000
"""Messages serve_forever() keeps in memory by default (a long demo would otherwise grow without bound)."""


class _Connections:
    """The live SMTP sessions of one listener, so stopping can hang up on them and wait for them."""

    def __init__(self) -> None:
        self.live: set[_SinkSMTP] = set()
        self.idle = asyncio.Event()
        self.idle.set()

    def add(self, protocol: _SinkSMTP) -> None:
        self.live.add(protocol)
        self.idle.clear()

    def discard(self, protocol: _SinkSMTP) -> None:
        self.live.discard(protocol)
        if not self.live:
            self.idle.set()


class _SinkSMTP(SMTP):
    """aiosmtpd's SMTP protocol, registering itself while connected."""

    def __init__(self, handler: SinkHandler, connections: _Connections, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._connections = connections
        self._handler_for_reads = handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._handler_for_reads._note_read(data)
        super().data_received(data)

    def connection_lost(self, error: Exception | None) -> None:
        try:
            super().connection_lost(error)
        finally:
            self._connections.discard(self)


class _Listener:
    """A listening socket serving SinkHandler on the current event loop."""

    def __init__(self, handler: SinkHandler, host: str, port: int) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._connections: _Connections | None = None

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        connections = self._connections = _Connections()
        kwargs = self.handler._smtp_kwargs(loopback=self.host in LOOPBACK_HOSTS)

        def make_protocol() -> _SinkSMTP:
            return _SinkSMTP(self.handler, connections, loop=loop, **kwargs)

        self._server = await loop.create_server(make_protocol, host=self.host, port=self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self, grace: float = 5.0) -> None:
        if self._server is None or self._connections is None:
            return
        self._server.close()
        for protocol in list(self._connections.live):
            if protocol.transport is not None:
                protocol.transport.close()
        try:
            async with asyncio.timeout(grace):
                await self._connections.idle.wait()
        except TimeoutError:
            logger.warning("sink: %d connections still open at shutdown", len(self._connections.live))
        await self._server.wait_closed()
        self._server = None


class RunningSink:
    """A sink serving on its own thread and event loop; made by start_sink(), ended by stop()."""

    def __init__(self, handler: SinkHandler, host: str, port: int) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------------

    def _start(self, ready_timeout: float) -> None:
        self._thread = threading.Thread(target=self._run, name=f"mailroom-sink-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(ready_timeout):
            self.stop()
            raise TimeoutError(f"SMTP sink did not start within {ready_timeout}s")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            if self._ready.is_set():
                logger.exception("SMTP sink on port %d failed", self.port)
            else:  # handed to the thread that called start_sink()
                self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        listener = _Listener(self.handler, self.host, self.port)
        await listener.start()
        self.port = listener.port
        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        self._ready.set()
        try:
            await self._stop_requested.wait()
        finally:
            await listener.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Hang up on every client, close the socket and end the thread; safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stop_requested is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop_requested.set)
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"SMTP sink on port {self.port} did not stop within {timeout}s")

    def __enter__(self) -> RunningSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- conveniences, delegated to the handler --------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the sink is serving."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def messages(self) -> list[ReceivedMessage]:
        """A snapshot of the messages accepted so far, oldest first."""
        return self.handler.messages

    def messages_to(self, address: str) -> list[ReceivedMessage]:
        """The accepted messages with ``address`` among their envelope recipients."""
        return self.handler.messages_to(address)

    async def wait_for(self, count: int = 1, timeout: float = DEFAULT_WAIT_TIMEOUT) -> bool:  # noqa: ASYNC109
        """Wait until at least ``count`` messages are stored; False on timeout."""
        return await self.handler.wait_for(count, timeout)

    def wait_for_sync(self, count: int = 1, timeout: float = DEFAULT_WAIT_TIMEOUT) -> bool:
        """Block until at least ``count`` messages are stored; False on timeout."""
        return self.handler.wait_for_sync(count, timeout)

    def on_rcpt(self, match: Matcher, *actions: ActionLike) -> Rule:
        """Script ``RCPT TO`` answers for matching recipients; see Script.on_rcpt()."""
        return self.handler.script.on_rcpt(match, *actions)

    def on_data(self, match: Matcher, *actions: ActionLike) -> Rule:
        """Script end-of-``DATA`` answers for envelopes with a matching recipient; see Script.on_data()."""
        return self.handler.script.on_data(match, *actions)

    def clear(self) -> None:
        """Forget stored messages and scripted rules."""
        self.handler.clear()


def _make_handler(
    handler: SinkHandler | None,
    maildir: str | PathLike[str] | None,
    auth: tuple[str, str] | None,
    refuse_share: RefuseShare | None,
    keep: int | None,
    any_login: bool = False,
) -> SinkHandler:
    if handler is None:
        return SinkHandler(
            maildir=maildir, auth=auth, refuse_share=refuse_share, keep=keep, any_login=any_login
        )
    if maildir is not None or auth is not None or refuse_share is not None or any_login:
        raise ValueError("pass either a handler or maildir/auth/refuse_share/any_login, not both")
    return handler


def _logins(handler: SinkHandler, host: str) -> str:
    """What the startup line says of logins."""
    if handler.requires_auth:
        return ", AUTH required"
    if not handler.any_login:
        return ""
    if host in LOOPBACK_HOSTS:
        return ", any login accepted (AUTH PLAIN, LOGIN)"
    return ", AUTH not offered (no TLS here, and off the loopback interface a login would cross the network)"


def start_sink(
    host: str = "127.0.0.1",
    port: int = 0,
    maildir: str | PathLike[str] | None = None,
    *,
    auth: tuple[str, str] | None = None,
    refuse_share: RefuseShare | None = None,
    handler: SinkHandler | None = None,
    keep: int | None = None,
    ready_timeout: float = 5.0,
) -> RunningSink:
    """Start a sink on a background thread (port 0 picks a free port) and return it once it listens."""
    sink = RunningSink(_make_handler(handler, maildir, auth, refuse_share, keep), host, port)
    sink._start(ready_timeout)
    return sink


async def serve_forever(
    host: str = "127.0.0.1",
    port: int = 1025,
    maildir: str | PathLike[str] | None = None,
    *,
    auth: tuple[str, str] | None = None,
    refuse_share: RefuseShare | None = None,
    handler: SinkHandler | None = None,
    keep: int | None = CLI_KEEP,
    on_ready: Callable[[int], None] | None = None,
    any_login: bool = False,
) -> None:
    """Serve on the current event loop until cancelled, logging one masked line per received message."""
    listener = _Listener(_make_handler(handler, maildir, auth, refuse_share, keep, any_login), host, port)
    aiosmtpd_log = logging.getLogger("mail.log")
    quieten = aiosmtpd_log.level == logging.NOTSET
    if quieten:
        # aiosmtpd logs every envelope address unmasked at INFO; keep only its warnings.
        aiosmtpd_log.setLevel(logging.WARNING)
    bound = await listener.start()
    logger.info(
        "sink listening on %s:%d%s%s",
        host,
        bound,
        f", saving to Maildir {maildir}" if maildir is not None else "",
        _logins(listener.handler, host),
    )
    if on_ready is not None:
        on_ready(bound)
    try:
        await asyncio.get_running_loop().create_future()
    finally:
        await listener.close()
        if quieten:
            aiosmtpd_log.setLevel(logging.NOTSET)
        logger.info("sink on %s:%d stopped", host, bound)
