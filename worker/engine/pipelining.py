"""SMTP PIPELINING (RFC 2920) on top of aiosmtplib: several commands in one write, one reply read per command.

aiosmtplib's ``SMTPProtocol`` reads exactly one reply per command: while a parsed reply waits to be
picked up it drops incoming data, and a second reply already in its buffer is never parsed. The
subclass here keeps buffering during a pipelined exchange and parses each further reply from the
buffer before waiting for more data; outside a pipelined exchange it behaves exactly like its parent.
Timeouts apply to each reply, as in aiosmtplib. Reading a reply costs less than in the parent: one
already parsed is returned at once, and a wait puts one timer on the reply's future rather than
using ``wait_for`` (which adds a future and callbacks per reply: a tenth of the worker's CPU at full
speed) or ``asyncio.timeout`` (a task lookup and a cancellation scope per reply).

Replies are read into one buffer per connection (asyncio's ``BufferedProtocol``), not into a new bytes
object per read. asyncio's plain reads allocate the transport's whole read limit (256 KiB) for every
read and shrink it afterwards: above glibc's mmap threshold that is an ``mmap``, an ``mremap`` and a
``munmap`` for every reply group, which cost the worker more CPU than parsing the replies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiosmtplib import SMTP, SMTPReadTimeoutError, SMTPServerDisconnected
from aiosmtplib.protocol import (
    COMMAND_INJECTION_REGEX,
    MAX_LINE_LENGTH,
    MAX_RESPONSE_LENGTH,
    PERIOD_REGEX,
    SMTPProtocol,
    normalize_message_line_endings,
)
from aiosmtplib.response import SMTPResponse

CLOSING = 421
"""The server is closing the channel: no reply follows this one."""

READ_BUFFER_BYTES = 16_384
"""What one read of a connection's socket takes at most: a pipelined group's replies fit many times."""


class PipeliningProtocol(SMTPProtocol, asyncio.BufferedProtocol):
    """``SMTPProtocol`` that can read the replies to several commands written at once, reading them
    into a buffer of its own."""

    _pipelining = False
    # Replies owed to commands written behind a message body (the next message's MAIL, RCPT and
    # DATA), read when that message's turn comes: see `send_body` and `read_announced`.
    _announced = 0
    # Replies read so far of the group being read (MAIL, RCPT, DATA): where a timeout or drop struck.
    group_read = 0
    # Where the transport reads into: made with the first read (see `adopt`: no state before then).
    _read_into: memoryview | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self._read_into
        if view is None:
            view = self._read_into = memoryview(bytearray(READ_BUFFER_BYTES))
        return view

    def buffer_updated(self, nbytes: int) -> None:
        # The transport read into the one buffer `get_buffer` gave it; this returns that buffer.
        self.data_received(bytes(self.get_buffer(-1)[:nbytes]))

    def data_received(self, data: bytes) -> None:
        waiter = self._response_waiter
        if waiter is not None and (
            (self._pipelining and waiter.done()) or (self._announced and not self._response_pending)
        ):
            # A reply is parsed and not yet picked up, or replies to announced commands arrive before
            # anyone reads them: keep them instead of dropping them.
            self._buffer.extend(data)
            if len(self._buffer) > MAX_RESPONSE_LENGTH * 4:
                del self._buffer[:]
                self.close_transport()
            return
        super().data_received(data)

    async def read_response(self, timeout: float | None = None) -> SMTPResponse:  # noqa: ASYNC109
        """The parent's ``read_response`` (same errors, same waiter bookkeeping), with a cheaper wait."""
        waiter = self._response_waiter
        if waiter is None:
            raise SMTPServerDisconnected("Connection lost")
        self._response_pending = True
        try:
            if not waiter.done():
                # One timer on the waiter itself: asyncio.timeout costs twice as much per reply.
                timer = None if timeout is None else self._loop.call_later(timeout, _expire, waiter)
                try:
                    await waiter
                finally:
                    if timer is not None:
                        timer.cancel()
            result = waiter.result()
        except TimeoutError as exc:
            raise SMTPReadTimeoutError("Timed out waiting for server response") from exc
        finally:
            self._response_pending = False
            # As in the parent: after a disconnect there is no next waiter.
            self._response_waiter = None if self.transport is None else self._loop.create_future()
        return result

    def _read_response_from_buffer(self) -> SMTPResponse | None:
        """The parent's parser, with a shortcut for the usual reply: one line, a three-digit code."""
        buffer = self._buffer
        end = buffer.find(b"\n")
        if 4 <= end < MAX_LINE_LENGTH and buffer[3:4] == b" " and buffer[:3].isdigit():
            line = bytes(buffer[: end + 1])
            del buffer[: end + 1]
            return SMTPResponse(int(line[:3]), line[4:].strip(b" \t\r\n").decode("utf-8", "surrogateescape"))
        return super()._read_response_from_buffer()

    def close_transport(self) -> None:
        """Hang up (a server flooding replies); the pending read then fails as a lost connection."""
        if self.transport is not None:
            self.transport.close()

    async def _next_response(self, timeout: float | None) -> SMTPResponse:  # noqa: ASYNC109
        """The next reply: from the buffer when a whole one is there already, else as it arrives."""
        self._response_pending = True
        waiter = self._response_waiter
        if waiter is not None and not waiter.done() and self._buffer:
            try:
                parsed = self._read_response_from_buffer()
            except Exception as exc:  # the same malformed-reply errors the parent sets on its waiter
                self._set_response_exception(waiter, exc)
            else:
                if parsed is not None:
                    # Already here: no waiter round (the pending one stays for the next reply).
                    self._response_pending = False
                    return parsed
        return await self.read_response(timeout=timeout)

    async def execute_pipeline(self, commands: Sequence[bytes], timeout: float | None) -> list[SMTPResponse]:  # noqa: ASYNC109
        """Write ``commands`` (without CRLF) in one write and read one reply each, in order.

        Stops early after a 421 reply (the server is closing the channel), so the list may be shorter
        than ``commands``. Raises like ``execute_command`` for a lost connection or a timeout.
        """
        _check_commands(commands)
        if self._command_lock is None:
            raise SMTPServerDisconnected("Server not connected")
        async with self._command_lock:
            self._response_pending = True
            self._pipelining = True
            self.group_read = 0
            try:
                self.write(b"".join(command + b"\r\n" for command in commands))
                responses: list[SMTPResponse] = []
                for _ in commands:
                    response = await self._next_response(timeout)
                    self.group_read += 1
                    responses.append(response)
                    if response.code == CLOSING:
                        break
                return responses
            finally:
                self._pipelining = False

    async def send_body(
        self,
        message: bytes,
        timeout: float | None,  # noqa: ASYNC109
        then: Sequence[bytes] = (),
    ) -> SMTPResponse:
        """After a 354 reply to DATA: the message, dot-stuffed as aiosmtplib's DATA does, and its reply.

        ``then`` are commands written in the same write, behind the body (RFC 2920 lets the end of
        the data start a new group): the next message's MAIL, RCPT and DATA. Their replies are owed
        until `read_announced` reads them.
        """
        _check_commands(then)
        if self._command_lock is None:
            raise SMTPServerDisconnected("Server not connected")
        message = wire_data(message)
        async with self._command_lock:
            self._response_pending = True
            self._pipelining = True
            try:
                self.write(message + b"".join(command + b"\r\n" for command in then))
                self._announced = len(then)
                return await self._next_response(timeout)
            finally:
                self._pipelining = False

    @property
    def announced(self) -> int:
        """How many replies are owed to commands written behind the last body."""
        return self._announced

    async def read_announced(self, timeout: float | None) -> list[SMTPResponse]:  # noqa: ASYNC109
        """The replies owed to the commands written behind the last body, in order (stops after a 421)."""
        if self._command_lock is None:
            raise SMTPServerDisconnected("Server not connected")
        async with self._command_lock:
            self._pipelining = True
            self.group_read = 0
            try:
                responses: list[SMTPResponse] = []
                while self._announced:
                    self._announced -= 1
                    response = await self._next_response(timeout)
                    self.group_read += 1
                    responses.append(response)
                    if response.code == CLOSING:
                        self._announced = 0
                return responses
            finally:
                self._pipelining = False


def _expire(waiter: asyncio.Future[SMTPResponse]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def wire_data(message: bytes) -> bytes:
    """The message as DATA sends it: CRLF line endings, dot-stuffed, ending in CRLF "." CRLF.

    A message Mailroom built is already CRLF throughout with no line starting with a dot, so it is
    checked with a few scans instead of being rewritten by two regular expressions.
    """
    crlf = message.count(b"\r\n")
    if (
        message.endswith(b"\r\n")
        and message.count(b"\n") == crlf
        and message.count(b"\r") == crlf
        and b"\n." not in message
        and not message.startswith(b".")
    ):
        return message + b".\r\n"
    return PERIOD_REGEX.sub(b"..", normalize_message_line_endings(message)) + b".\r\n"


def _check_commands(commands: Sequence[bytes]) -> None:
    for command in commands:
        if COMMAND_INJECTION_REGEX.search(command):
            raise ValueError("Command arg contains a prohibited control character")


def enable_pipelining(client: SMTP) -> PipeliningProtocol | None:
    """The client's protocol, able to pipeline, when its server advertised PIPELINING (after EHLO)
    and the protocol was adopted (`SmtpConnection` adopts it as soon as the connection is open)."""
    protocol = client.protocol
    if not isinstance(protocol, PipeliningProtocol) or not client.supports_extension("pipelining"):
        return None
    return protocol


def adopt(protocol: SMTPProtocol) -> None:
    """Make aiosmtplib's protocol a `PipeliningProtocol` and have its transport read into its buffer.

    aiosmtplib builds its protocol inside connect() with no hook to choose the class; the subclass
    adds no state of its own beyond class-level defaults and behaves as its parent outside a pipelined
    exchange, so switching is safe. A transport decides how it reads when it is given its protocol,
    so it is given it again (a TLS transport passes it on to its TLS layer)."""
    if type(protocol) is not SMTPProtocol:
        return
    protocol.__class__ = PipeliningProtocol
    if protocol.transport is not None:
        protocol.transport.set_protocol(protocol)
