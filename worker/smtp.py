"""SMTP delivery over aiosmtplib: one persistent connection per slot, reset after anything unexpected."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import aiosmtplib
from aiosmtplib.response import SMTPResponse

from worker.classify import Reply, clean_reply
from worker.message import Envelope
from worker.pipelining import CLOSING, PipeliningProtocol, enable_pipelining

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SmtpAccount:
    """How to reach and authenticate to one sender account's SMTP server."""

    sender_id: int
    host: str
    port: int
    security: str  # none, starttls, tls
    username: str | None
    password: str | None = field(repr=False)  # never in a log line or a traceback
    timeout: float = 30.0


@dataclass(frozen=True)
class Attempt:
    """The reply to one message and how long it took."""

    reply: Reply
    duration_ms: int


class SmtpConnection:
    """A persistent connection to one account's server; reconnects lazily, resets after errors."""

    def __init__(self, account: SmtpAccount) -> None:
        self.account = account
        self._client: aiosmtplib.SMTP | None = None

    async def _connect(self) -> aiosmtplib.SMTP:
        account = self.account
        client = aiosmtplib.SMTP(
            hostname=account.host,
            port=account.port,
            use_tls=account.security == "tls",
            start_tls=account.security == "starttls",
            timeout=account.timeout,
        )
        # Held before anything can fail, so a refused login still closes this socket.
        self._client = client
        await client.connect()
        await client.ehlo()
        if account.username:
            await client.login(account.username, account.password or "")
        return client

    async def close(self) -> None:
        """Say QUIT when possible, drop the connection otherwise."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if client.is_connected:
                await asyncio.wait_for(client.quit(), timeout=2)
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            client.close()

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    async def _reset(self) -> None:
        """After a refused command the session may hold half a transaction: RSET, or start over."""
        client = self._client
        if client is None:
            return
        try:
            await client.rset()
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            self._drop()

    async def send(self, envelope: Envelope) -> Attempt:
        """Send one prepared message; never raises for SMTP or network trouble, it returns the reply."""
        started = time.perf_counter()
        reply = await self._send(envelope)
        return Attempt(reply=reply, duration_ms=int((time.perf_counter() - started) * 1000))

    async def _send(self, envelope: Envelope) -> Reply:
        phase = "connect"
        try:
            client = self._client if self._client is not None and self._client.is_connected else None
            if client is None:
                self._drop()
                phase = "auth" if self.account.username else "connect"
                client = await self._connect()
            phase = "mail"
            return await _transaction(client, envelope)
        except aiosmtplib.SMTPAuthenticationError as exc:
            self._drop()
            return clean_reply(exc.code, exc.message, "auth")
        except aiosmtplib.SMTPRecipientRefused as exc:
            await self._reset()
            return clean_reply(exc.code, exc.message, "rcpt")
        except aiosmtplib.SMTPDataError as exc:
            if exc.code == 421:
                self._drop()
            else:
                await self._reset()
            return clean_reply(exc.code, exc.message, "data")
        except aiosmtplib.SMTPSenderRefused as exc:
            await self._reset()
            return clean_reply(exc.code, exc.message, "mail")
        except aiosmtplib.SMTPResponseException as exc:
            # Refused while connecting or greeting: start the next message on a new connection.
            self._drop()
            return clean_reply(exc.code, exc.message, phase)
        except (aiosmtplib.SMTPNotSupported, aiosmtplib.SMTPException) as exc:
            self._drop()
            if phase != "mail" and type(exc) in (aiosmtplib.SMTPNotSupported, aiosmtplib.SMTPException):
                # STARTTLS or AUTH missing, no usable AUTH mechanism: the account is misconfigured.
                return clean_reply(530, f"{type(exc).__name__}: {exc}", "auth")
            return clean_reply(None, f"{type(exc).__name__}: {exc}".strip(), phase)
        except (OSError, TimeoutError) as exc:
            # Timeouts, dropped connections, refused connects: nothing reliable is left on this socket.
            self._drop()
            return clean_reply(None, f"{type(exc).__name__}: {exc}".strip(), phase)


async def _transaction(client: aiosmtplib.SMTP, envelope: Envelope) -> Reply:
    """MAIL, RCPT and DATA for one message and one recipient: pipelined when the server allows it.

    aiosmtplib's `sendmail` re-parses both addresses with `email.utils.parseaddr` on every
    message (a quarter of the worker's CPU); these addresses were validated and normalised
    at enqueue (ASCII, no quoting), so the commands are written directly.
    """
    for address in (envelope.sender, envelope.recipient):
        if not address.isascii() or any(c in address for c in "<>\r\n "):
            raise aiosmtplib.SMTPSenderRefused(501, f"unsafe address {address!r}", envelope.sender)
    mail = b"FROM:<" + envelope.sender.encode("ascii") + b">"
    rcpt = b"TO:<" + envelope.recipient.encode("ascii") + b">"
    protocol = enable_pipelining(client)
    if protocol is not None:
        return await _pipelined(client, protocol, envelope, mail, rcpt)
    response = await client.execute_command(b"MAIL", mail)
    if response.code != 250:
        raise aiosmtplib.SMTPSenderRefused(response.code, response.message, envelope.sender)
    response = await client.execute_command(b"RCPT", rcpt)
    if response.code not in (250, 251):
        raise aiosmtplib.SMTPRecipientRefused(response.code, response.message, envelope.recipient)
    response = await client.data(envelope.content)
    return clean_reply(response.code, response.message, "data")


async def _pipelined(
    client: aiosmtplib.SMTP, protocol: PipeliningProtocol, envelope: Envelope, mail: bytes, rcpt: bytes
) -> Reply:
    """RFC 2920: MAIL, RCPT and DATA in one write, their three replies, then the body and its reply.

    Raises the same errors as the command-by-command path, so `SmtpConnection._send` treats a
    refusal the same way: every reply is read before raising, so RSET finds the session in step.
    """
    try:
        replies = await protocol.execute_pipeline((b"MAIL " + mail, b"RCPT " + rcpt, b"DATA"), client.timeout)
        if replies[-1].code == CLOSING:
            client.close()  # as aiosmtplib does after a 421 to a single command
        if replies[0].code != 250:
            _refused_data(client, replies)
            raise aiosmtplib.SMTPSenderRefused(replies[0].code, replies[0].message, envelope.sender)
        if replies[1].code not in (250, 251):
            _refused_data(client, replies)
            raise aiosmtplib.SMTPRecipientRefused(replies[1].code, replies[1].message, envelope.recipient)
        if replies[2].code != 354:
            raise aiosmtplib.SMTPDataError(replies[2].code, replies[2].message)
        response = await protocol.send_body(envelope.content, client.timeout)
    except (aiosmtplib.SMTPServerDisconnected, aiosmtplib.SMTPTimeoutError):
        client.close()  # a lost or late reply leaves the session out of step, as in aiosmtplib
        raise
    if response.code == CLOSING:
        client.close()
    if response.code != 250:
        raise aiosmtplib.SMTPDataError(response.code, response.message)
    return clean_reply(response.code, response.message, "data")


def _refused_data(client: aiosmtplib.SMTP, replies: list[SMTPResponse]) -> None:
    """MAIL or RCPT was refused yet DATA got 354: the server now expects a body, so hang up instead."""
    if len(replies) == 3 and replies[2].code == 354:
        client.close()
