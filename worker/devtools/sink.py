"""A local SMTP server that catches mail (like MailPit): for ``mailroom sink``, demos and the test suite."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import mailbox
import secrets
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from functools import cached_property
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, NoReturn

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from worker.core.masking import mask_address, mask_addresses

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

Stage = Literal["RCPT", "DATA"]
Matcher = str | Callable[[str], bool]

SERVER_HOSTNAME: Final = "mailroom-sink"
DEFAULT_WAIT_TIMEOUT: Final = 5.0
CLI_KEEP: Final = 1000
"""Messages serve_forever() keeps in memory by default (a long demo would otherwise grow without bound)."""


# --------------------------------------------------------------------------------------------------
# Scripted behaviour
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A canned SMTP reply such as ``Reply(450, "4.2.0 Mailbox busy")``; a 2xx reply accepts."""

    code: int
    text: str = ""

    def __post_init__(self) -> None:
        if not 200 <= self.code <= 599:
            raise ValueError(f"SMTP reply code must be 200-599, got {self.code}")
        if "\r" in self.text or "\n" in self.text:
            raise ValueError("SMTP reply text must be a single line")

    @classmethod
    def parse(cls, line: str) -> Reply:
        """Parse a reply line such as ``"550 5.1.1 User unknown"``."""
        code, _, text = line.strip().partition(" ")
        if not (len(code) == 3 and code.isdigit()):
            raise ValueError(f"not an SMTP reply line: {line!r}")
        return cls(int(code), text.strip())

    @property
    def line(self) -> str:
        """The reply as sent on the wire, without CRLF."""
        return f"{self.code} {self.text}".rstrip()

    @property
    def accepts(self) -> bool:
        """Whether this reply accepts the recipient or message (2xx)."""
        return 200 <= self.code < 300


@dataclass(frozen=True)
class Accept:
    """Accept with the sink's normal reply (``250 2.1.5 OK`` for RCPT, ``250 2.0.0 OK: queued as ...``)."""


@dataclass(frozen=True)
class Drop:
    """Close the connection without replying (for DATA: after the body is read, before the final reply)."""


@dataclass(frozen=True)
class Stall:
    """Do not answer: forever (``seconds=None``) or for ``seconds``, then carry on as if unscripted."""

    seconds: float | None = None


ACCEPT: Final = Accept()
Action = Reply | Accept | Drop | Stall
ActionLike = Action | str


def _as_action(action: ActionLike) -> Action:
    return Reply.parse(action) if isinstance(action, str) else action


def _normalise(address: str) -> str:
    return address.strip().lower()


class Rule:
    """Scripted answers for one stage and the recipients a matcher selects; the last action repeats."""

    def __init__(self, stage: Stage, match: Matcher, actions: Sequence[ActionLike]) -> None:
        if not actions:
            raise ValueError("a rule needs at least one action")
        self.stage: Final = stage
        self.match: Final = match
        self.actions: Final = tuple(_as_action(a) for a in actions)
        self.hits = 0
        """How many attempts this rule has answered so far."""

    def matches(self, address: str) -> bool:
        """Whether the rule applies to ``address`` (case-insensitive for a string matcher)."""
        if isinstance(self.match, str):
            return _normalise(self.match) == _normalise(address)
        return self.match(address)

    def _take(self) -> Action:
        action = self.actions[min(self.hits, len(self.actions) - 1)]
        self.hits += 1
        return action

    def __repr__(self) -> str:
        return f"Rule({self.stage}, {self.match!r}, {self.actions!r}, hits={self.hits})"


class Script:
    """Thread-safe ordered rules; the first rule (in order added) that matches a recipient answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []

    def on_rcpt(self, match: Matcher, *actions: ActionLike) -> Rule:
        """Answer ``RCPT TO`` for matching recipients: one action per attempt, the last one repeating."""
        return self._add(Rule("RCPT", match, actions))

    def on_data(self, match: Matcher, *actions: ActionLike) -> Rule:
        """Answer the end of ``DATA`` for envelopes with a matching recipient, one action per attempt."""
        return self._add(Rule("DATA", match, actions))

    def clear(self) -> None:
        """Forget every rule."""
        with self._lock:
            self._rules.clear()

    def next_action(self, stage: Stage, recipients: Sequence[str]) -> Action | None:
        """Consume and return the scripted action for this attempt, or None when no rule matches."""
        with self._lock:
            for rule in self._rules:
                if rule.stage == stage and any(rule.matches(r) for r in recipients):
                    return rule._take()
        return None

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule


@dataclass(frozen=True)
class RefuseShare:
    """Refuse fixed shares of recipients, picked by address hash: 4xx ``temporary``, 5xx ``permanent``."""

    temporary: float = 0.0
    permanent: float = 0.0
    temporary_reply: Reply = Reply(450, "4.2.1 Mailbox temporarily unavailable")
    permanent_reply: Reply = Reply(550, "5.1.1 User unknown")

    def __post_init__(self) -> None:
        for name, share in (("temporary", self.temporary), ("permanent", self.permanent)):
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"{name} share must be between 0 and 1, got {share}")
        if self.temporary + self.permanent > 1.0:
            raise ValueError("temporary + permanent shares must not exceed 1")

    def reply_for(self, address: str) -> Reply | None:
        """The refusal this address always gets, or None if it is accepted."""
        digest = hashlib.sha256(_normalise(address).encode("utf-8", "surrogateescape")).digest()
        point = int.from_bytes(digest[:8], "big") / 2**64
        if point < self.permanent:
            return self.permanent_reply
        if point < self.permanent + self.temporary:
            return self.temporary_reply
        return None


# --------------------------------------------------------------------------------------------------
# The handler
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedMessage:
    """One message the sink accepted: envelope, raw bytes, the parsed message and when it arrived."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    content: bytes
    received_at: datetime
    queue_id: str
    login: str | None = None
    peer: str | None = None  # the client's "host:port": one value per SMTP connection

    @cached_property
    def message(self) -> EmailMessage:
        """``content`` parsed with ``email.policy.default`` (on first access, so bulk runs stay cheap)."""
        return BytesParser(policy=policy.default).parsebytes(self.content)


_Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Event]


class SinkHandler:
    """aiosmtpd handler: follows a Script, optionally requires AUTH, and stores what it accepts."""

    def __init__(
        self,
        *,
        maildir: str | PathLike[str] | None = None,
        auth: tuple[str, str] | None = None,
        refuse_share: RefuseShare | None = None,
        script: Script | None = None,
        keep: int | None = None,
        pipelining: bool = True,
    ) -> None:
        """``keep`` bounds the messages held in memory (None: all); wait_for() counts every message.

        ``pipelining`` advertises PIPELINING (RFC 2920) in the EHLO reply; aiosmtpd reads commands one
        line at a time, so it answers pipelined commands in order either way.
        """
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.script = script if script is not None else Script()
        self.refuse_share = refuse_share
        self._credentials = auth
        self._maildir: mailbox.Maildir | None = None
        if maildir is not None:
            Path(maildir).parent.mkdir(parents=True, exist_ok=True)
            self._maildir = mailbox.Maildir(maildir, create=True)
        self._cond = threading.Condition()
        self._messages: deque[ReceivedMessage] = deque(maxlen=keep)
        self._received = 0
        self._waiters: list[_Waiter] = []
        self.pipelining = pipelining
        self._pipelined_reads = 0
        self._announced_reads = 0

    # ---- what tests and the CLI read -------------------------------------------------------------

    @property
    def requires_auth(self) -> bool:
        """Whether clients must AUTH before MAIL FROM."""
        return self._credentials is not None

    @property
    def messages(self) -> list[ReceivedMessage]:
        """A snapshot of the messages accepted so far (the newest ``keep``), oldest first."""
        with self._cond:
            return list(self._messages)

    @property
    def received_count(self) -> int:
        """How many messages were accepted since the start or the last clear(), kept or not."""
        with self._cond:
            return self._received

    @property
    def pipelined_reads(self) -> int:
        """How many single reads from a client held both a MAIL and a RCPT command (a pipelining client)."""
        with self._cond:
            return self._pipelined_reads

    @property
    def announced_reads(self) -> int:
        """How many single reads from a client held the end of a message and the next MAIL command."""
        with self._cond:
            return self._announced_reads

    def messages_to(self, address: str) -> list[ReceivedMessage]:
        """The accepted messages with ``address`` among their envelope recipients."""
        wanted = _normalise(address)
        return [m for m in self.messages if any(_normalise(r) == wanted for r in m.rcpt_tos)]

    def clear(self) -> None:
        """Forget the stored messages (not the Maildir files) and the script."""
        with self._cond:
            self._messages.clear()
            self._received = 0
            self._pipelined_reads = 0
            self._announced_reads = 0
        self.script.clear()

    def wait_for_sync(self, count: int = 1, timeout: float = DEFAULT_WAIT_TIMEOUT) -> bool:
        """Block until ``received_count >= count``; False on timeout. Never call it on the sink's own loop."""
        with self._cond:
            return self._cond.wait_for(lambda: self._received >= count, timeout)

    async def wait_for(self, count: int = 1, timeout: float = DEFAULT_WAIT_TIMEOUT) -> bool:  # noqa: ASYNC109
        """Wait, from any event loop, until ``received_count >= count``; False on timeout."""
        loop = asyncio.get_running_loop()
        waiter: _Waiter = (loop, asyncio.Event())
        with self._cond:
            if self._received >= count:
                return True
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    await waiter[1].wait()
                    waiter[1].clear()
                    with self._cond:
                        if self._received >= count:
                            return True
        except TimeoutError:
            with self._cond:
                return self._received >= count
        finally:
            with self._cond:
                self._waiters.remove(waiter)

    # ---- aiosmtpd hooks --------------------------------------------------------------------------

    async def handle_EHLO(
        self, server: SMTP, session: Session, envelope: Envelope, hostname: str, responses: list[str]
    ) -> list[str]:
        """aiosmtpd's EHLO reply, with PIPELINING before the last line when enabled."""
        session.host_name = hostname  # aiosmtpd leaves this to a handler that has this hook
        if self.pipelining:
            responses.insert(len(responses) - 1, "250-PIPELINING")
        return responses

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options: list[str]
    ) -> str:
        """Accept the sender, unless AUTH is required and has not happened."""
        if self._credentials is not None and not session.authenticated:
            return "530 5.7.0 Authentication required"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        """Answer a recipient as scripted, else by ``refuse_share``, else accept it."""
        action = await self._scripted(server, "RCPT", [address])
        if action is None and self.refuse_share is not None:
            action = self.refuse_share.reply_for(address)
        if isinstance(action, Reply) and not action.accepts:
            logger.debug("sink refused RCPT %s: %s", mask_address(address), action.line)
            return await self._refuse(server, action)
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return action.line if isinstance(action, Reply) else "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        """Answer the message as scripted, else store it (memory, optional Maildir) and accept it."""
        action = await self._scripted(server, "DATA", envelope.rcpt_tos)
        if isinstance(action, Reply) and not action.accepts:
            logger.debug("sink refused DATA for %s: %s", mask_addresses(envelope.rcpt_tos), action.line)
            return await self._refuse(server, action)
        content = envelope.original_content or b""
        queue_id = secrets.token_hex(6).upper()
        login = session.auth_data if isinstance(session.auth_data, str) else None
        received = ReceivedMessage(
            mail_from=envelope.mail_from or "",
            rcpt_tos=tuple(envelope.rcpt_tos),
            content=content,
            received_at=datetime.now(UTC),
            queue_id=queue_id,
            login=login,
            peer=f"{session.peer[0]}:{session.peer[1]}" if session.peer else None,
        )
        if self._maildir is not None:
            self._maildir.add(content)
        self._store(received)
        logger.info(
            "sink received %s from %s for %s (%d bytes)",
            queue_id,
            mask_address(received.mail_from),
            mask_addresses(received.rcpt_tos),
            len(content),
        )
        return action.line if isinstance(action, Reply) else f"250 2.0.0 OK: queued as {queue_id}"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        """aiosmtpd ``authenticator`` for LOGIN and PLAIN; wrong credentials get ``535 5.7.8``."""
        if self._credentials is None or not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        username, password = self._credentials
        user_ok = hmac.compare_digest(auth_data.login, username.encode())
        password_ok = hmac.compare_digest(auth_data.password, password.encode())
        if user_ok and password_ok:
            return AuthResult(success=True, handled=False, auth_data=username)
        logger.info("sink rejected %s credentials", mechanism)
        return AuthResult(success=False, handled=False)

    # ---- internals -------------------------------------------------------------------------------

    async def _scripted(self, server: SMTP, stage: Stage, recipients: Sequence[str]) -> Reply | Accept | None:
        action = self.script.next_action(stage, recipients)
        if isinstance(action, Drop):
            await _drop_connection(server)
        elif isinstance(action, Stall):
            if action.seconds is None:
                await asyncio.Event().wait()  # until the client hangs up or the sink stops
            else:
                await asyncio.sleep(action.seconds)
            return None
        return action

    async def _refuse(self, server: SMTP, reply: Reply) -> str:
        if reply.code == 421:
            # 421 means "closing the channel": say it, then hang up, as a real server does.
            await server.push(reply.line)
            await _drop_connection(server)
        return reply.line

    def _note_read(self, data: bytes) -> None:
        if data.startswith(b"MAIL ") and b"\r\nRCPT " in data:
            with self._cond:
                self._pipelined_reads += 1
        elif b"\r\n.\r\nMAIL " in data:
            with self._cond:
                self._announced_reads += 1

    def _store(self, message: ReceivedMessage) -> None:
        with self._cond:
            self._messages.append(message)
            self._received += 1
            self._cond.notify_all()
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody is waiting any more
                loop.call_soon_threadsafe(event.set)

    def _smtp_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "hostname": SERVER_HOSTNAME,
            "ident": "Mailroom sink",
            "enable_SMTPUTF8": True,
        }
        if self._credentials is not None:
            # Enforced in handle_MAIL rather than with auth_required=True, which warns without TLS.
            kwargs.update(authenticator=self.authenticate, auth_require_tls=False)
            logging.getLogger("mail.log").addFilter(_quiet_login_data_deprecation)
        return kwargs


def _quiet_login_data_deprecation(record: logging.LogRecord) -> bool:
    """Drop the warning aiosmtpd 1.4 logs on every successful AUTH (it sets its own deprecated field)."""
    return not record.getMessage().startswith("Session.login_data is deprecated")


async def _drop_connection(server: SMTP) -> NoReturn:
    """Close the client's connection and wait to be cancelled by aiosmtpd's connection_lost()."""
    if server.transport is not None:
        server.transport.close()
    await asyncio.get_running_loop().create_future()
    raise AssertionError("unreachable: connection_lost() cancels the session task")


# --------------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------------


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
        kwargs = self.handler._smtp_kwargs()

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
) -> SinkHandler:
    if handler is None:
        return SinkHandler(maildir=maildir, auth=auth, refuse_share=refuse_share, keep=keep)
    if maildir is not None or auth is not None or refuse_share is not None:
        raise ValueError("pass either a handler or maildir/auth/refuse_share, not both")
    return handler


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
) -> None:
    """Serve on the current event loop until cancelled, logging one masked line per received message."""
    listener = _Listener(_make_handler(handler, maildir, auth, refuse_share, keep), host, port)
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
        ", AUTH required" if auth is not None else "",
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
