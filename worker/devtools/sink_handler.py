"""The sink's SMTP handler: checks logins, follows its script, keeps and stores what it received."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import mailbox
import secrets
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from functools import cached_property
from os import PathLike
from pathlib import Path
from typing import Any, NoReturn

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from worker.core.masking import mask_address, mask_addresses
from worker.devtools.sink_script import (
    DEFAULT_WAIT_TIMEOUT,
    SERVER_HOSTNAME,
    Accept,
    Drop,
    RefuseShare,
    Reply,
    Script,
    Stage,
    Stall,
    _normalise,
)

logger = logging.getLogger("worker.devtools.sink")


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
        any_login: bool = False,
    ) -> None:
        """``keep`` bounds the messages held in memory (None: all); wait_for() counts every message.

        ``auth`` is the one login accepted, and then required; ``any_login`` offers AUTH (PLAIN, LOGIN)
        and takes whatever login a client gives, without requiring one (``mailroom sink``: a sender
        account with a username works against it as it would against its relay).

        ``pipelining`` advertises PIPELINING (RFC 2920) in the EHLO reply; aiosmtpd reads commands one
        line at a time, so it answers pipelined commands in order either way.
        """
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.script = script if script is not None else Script()
        self.refuse_share = refuse_share
        if auth is not None and any_login:
            raise ValueError("pass either auth (one login) or any_login, not both")
        self._credentials = auth
        self.any_login = any_login
        self._maildir: mailbox.Maildir | None = None
        if maildir is not None:
            # Maildir(create=True) makes tmp/new/cur only when the folder itself is missing: an existing
            # empty folder (`mkdir mail`) would fail every message with FileNotFoundError.
            for sub in ("tmp", "new", "cur"):
                (Path(maildir) / sub).mkdir(parents=True, exist_ok=True)
            self._maildir = mailbox.Maildir(maildir, create=False)
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
            try:
                self._maildir.add(content)
            except OSError as exc:
                # A reply, not an exception: aiosmtpd would answer 500 and keep the envelope, so the
                # client's next MAIL got "503 nested MAIL command".
                logger.error("sink could not store %s in the Maildir: %s", queue_id, exc)
                return f"451 4.3.0 could not store the message: {exc.strerror or exc}"
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
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        if self.any_login:
            return AuthResult(
                success=True, handled=False, auth_data=auth_data.login.decode("utf-8", "replace")
            )
        if self._credentials is None:
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

    def _smtp_kwargs(self, *, loopback: bool = True) -> dict[str, Any]:
        """aiosmtpd's SMTP settings. The sink has no TLS: taking any login, it takes AUTH in clear on the
        loopback interface only, where a login never crosses a network (`worker.core.plaintext`); with
        its one login (`auth`, a test's scripted server) it takes it wherever it listens."""
        kwargs: dict[str, Any] = {
            "hostname": SERVER_HOSTNAME,
            "ident": "Mailroom sink, any login accepted" if self.any_login else "Mailroom sink",
            "enable_SMTPUTF8": True,
        }
        if self._credentials is not None or self.any_login:
            # Enforced in handle_MAIL rather than with auth_required=True, which warns without TLS.
            kwargs.update(authenticator=self.authenticate, auth_require_tls=self.any_login and not loopback)
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
