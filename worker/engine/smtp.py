"""SMTP delivery over aiosmtplib: one persistent connection per slot, reset after anything unexpected."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiosmtplib
from aiosmtplib.response import SMTPResponse

from worker.core.message import Envelope
from worker.core.plaintext import PLAINTEXT_LOGIN_REFUSED, login_in_clear
from worker.engine.classify import Reply, clean_reply
from worker.engine.oauth import OAuthClient, TokenCache, TokenRefused, TokenUnavailable
from worker.engine.pipelining import CLOSING, PipeliningProtocol, enable_pipelining

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
    connect_timeout: float = 10.0
    command_timeout: float = 30.0
    data_timeout: float = 120.0
    # OAuth2 (AUTH XOAUTH2 as `username`, with access tokens from this client) instead of a password.
    oauth: OAuthClient | None = None
    # The operator allowed a login without TLS off the loopback interface (see worker.core.plaintext).
    allow_plaintext_login: bool = False


# One recipient of a many-recipient message whose copy was refused, and the reply that refused it.
Refusal = tuple[str, Reply]


@dataclass(frozen=True)
class Attempt:
    """The reply to one message and how long it took; for a message with several envelope recipients
    (`many`), the recipients whose copy was refused (the reply is then that of the last copy accepted)."""

    reply: Reply
    duration_ms: int
    refused: tuple[Refusal, ...] = ()
    many: bool = False


class SmtpConnection:
    """A persistent connection to one account's server; reconnects lazily, resets after errors."""

    def __init__(self, account: SmtpAccount, tokens: TokenCache | None = None) -> None:
        self.account = account
        # The process's OAuth2 access tokens, shared by every connection (a private cache otherwise).
        self._tokens = tokens if tokens is not None else TokenCache()
        self._client: aiosmtplib.SMTP | None = None
        # Where the session is: connect (TCP, greeting, EHLO, TLS), auth, mail, rcpt or data.
        self._phase = "connect"
        # The message whose MAIL, RCPT and DATA went out behind the previous body (replies unread).
        self._announced: Envelope | None = None

    async def _connect(self) -> aiosmtplib.SMTP:
        account = self.account
        if account.oauth is None:
            return await self._open(None)
        # The token first: an endpoint that fails leaves no SMTP connection waiting on it.
        self._phase = "connect"
        token = await self._tokens.token(account.sender_id, account.oauth, account.connect_timeout)
        try:
            return await self._open(token)
        except aiosmtplib.SMTPAuthenticationError:
            # Revoked or expired early: one fresh token on a fresh connection, then the refusal stands.
            self._drop()
            self._tokens.refused(account.sender_id, token)
            self._phase = "connect"
            token = await self._tokens.token(account.sender_id, account.oauth, account.connect_timeout)
            return await self._open(token)

    async def _open(self, token: str | None) -> aiosmtplib.SMTP:
        """Connect, greet, secure and log in: with the password, or with `token` (AUTH XOAUTH2)."""
        account = self.account
        self._phase = "connect"
        client = aiosmtplib.SMTP(
            hostname=account.host,
            port=account.port,
            use_tls=account.security == "tls",
            start_tls=account.security == "starttls",
            timeout=account.connect_timeout,
        )
        # Held before anything can fail, so a refused login still closes this socket.
        self._client = client
        await client.connect()
        await client.ehlo()
        if account.username and not _may_log_in(client, account):
            # Refused here, not only by the CLI: a row changed around it must not send a secret in clear.
            self._phase = "auth"
            raise aiosmtplib.SMTPException(PLAINTEXT_LOGIN_REFUSED.format(host=account.host))
        if token is not None and account.username:
            self._phase = "auth"
            if "xoauth2" not in client.server_auth_methods:
                raise aiosmtplib.SMTPException("the server does not offer AUTH XOAUTH2")
            # A refusal comes as a 334 error challenge: aiosmtplib answers it with the empty line
            # the XOAUTH2 protocol asks for, and raises the final 5xx.
            await client.auth_xoauth2(account.username, token)
        elif account.username:
            self._phase = "auth"
            await client.login(account.username, account.password or "")
        client.timeout = account.command_timeout
        return client

    async def close(self) -> None:
        """Say QUIT when possible, drop the connection otherwise."""
        if self._announced is not None:
            # The server waits for a body after DATA: nothing but hanging up ends that cleanly.
            self._drop()
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if client.is_connected:
                await asyncio.wait_for(client.quit(), timeout=2)
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            client.close()

    def forget_announced(self) -> None:
        """The announced message will not be sent after all (the batch stopped): hang up, see `close`."""
        if self._announced is not None:
            self._drop()

    def _drop(self) -> None:
        self._announced = None
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

    async def send(self, envelope: Envelope, upcoming: Envelope | None = None) -> Attempt:
        """Send one prepared message; never raises for SMTP or network trouble, it returns the reply.

        With `upcoming` (the message this connection sends next) and a pipelining server, that
        message's MAIL, RCPT and DATA go out in the same write as this body, so each message costs
        one round trip; the upcoming body itself is only written by its own `send`, so nothing is
        delivered before the caller has recorded this attempt.
        """
        started = time.perf_counter()
        if envelope.recipients:
            refused: list[Refusal] = []
            reply = await self._send(envelope, None, refused)
            duration_ms = int((time.perf_counter() - started) * 1000)
            return Attempt(reply, duration_ms, tuple(refused), many=True)
        if upcoming is not None and upcoming.recipients:
            upcoming = None  # a many-recipient message is never announced (see `_many_transaction`)
        reply = await self._send(envelope, upcoming)
        return Attempt(reply=reply, duration_ms=int((time.perf_counter() - started) * 1000))

    async def _send(
        self, envelope: Envelope, upcoming: Envelope | None, refused: list[Refusal] | None = None
    ) -> Reply:
        announced, self._announced = self._announced, None
        if announced is not None and announced != envelope:
            self._drop()  # another message than the one announced: that session is out of step
        try:
            client = self._client if self._client is not None and self._client.is_connected else None
            if client is None:
                self._drop()
                announced = None
                client = await self._connect()
            self._phase = "mail"
            if refused is not None:
                return await _many_transaction(
                    client, envelope, self.account, self._enter, refused, self._drop
                )
            reply, self._announced = await _transaction(
                client, envelope, announced is not None, upcoming, self.account, self._enter
            )
            return reply
        except TokenRefused as exc:
            # The token endpoint refused the client or its grant: the login fails (phase "token").
            self._drop()
            return clean_reply(None, f"OAuth2 token endpoint refused: {exc}", "token")
        except TokenUnavailable as exc:
            self._drop()
            return clean_reply(None, str(exc), "connect")
        except aiosmtplib.SMTPAuthenticationError as exc:
            # RFC 4954: only 235 completes AUTH; any other reply (a 250 too) is a failed authentication.
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
            if 200 <= exc.code < 300:
                # DATA answered 2xx instead of 354 (or the end of DATA with 2xx other than 250): not a send.
                return clean_reply(None, f"unexpected reply {exc.code} {exc.message}", "data")
            return clean_reply(exc.code, exc.message, "data")
        except aiosmtplib.SMTPSenderRefused as exc:
            await self._reset()
            return clean_reply(exc.code, exc.message, "mail")
        except aiosmtplib.SMTPResponseException as exc:
            # Refused while connecting, greeting or authenticating: start the next one on a new connection.
            self._drop()
            return clean_reply(exc.code, exc.message, self._phase)
        except (aiosmtplib.SMTPNotSupported, aiosmtplib.SMTPException) as exc:
            self._drop()
            if self._phase == "auth" and type(exc) in (aiosmtplib.SMTPNotSupported, aiosmtplib.SMTPException):
                # AUTH missing or no usable mechanism: the account is misconfigured.
                return clean_reply(530, f"{type(exc).__name__}: {exc}", "auth")
            return clean_reply(None, f"{type(exc).__name__}: {exc}".strip(), self._phase)
        except (OSError, TimeoutError) as exc:
            # Timeouts, dropped connections, refused connects, TLS failures: nothing reliable is left.
            self._drop()
            return clean_reply(None, f"{type(exc).__name__}: {exc}".strip(), self._phase)

    def _enter(self, phase: str) -> None:
        self._phase = phase


def _may_log_in(client: aiosmtplib.SMTP, account: SmtpAccount) -> bool:
    """Whether the login may go out: over TLS, to the loopback interface, or allowed in clear by the operator."""
    encrypted = client.get_transport_info("sslobject") is not None
    return (
        encrypted
        or account.allow_plaintext_login
        or not login_in_clear(account.host, "none", account.username)
    )


# What an envelope address may not hold to be written straight into MAIL FROM:<...> or RCPT TO:<...>.
_UNSAFE = re.compile(r"[<>\r\n ]|[^\x00-\x7f]")


def _unsafe(address: str) -> bool:
    return _UNSAFE.search(address) is not None


def _envelope_commands(envelope: Envelope) -> tuple[bytes, bytes] | None:
    """MAIL and RCPT arguments for a message, or None when an address could not be written safely."""
    if _unsafe(envelope.sender) or _unsafe(envelope.recipient):
        return None
    return b"FROM:<" + envelope.sender.encode("ascii") + b">", b"TO:<" + envelope.recipient.encode(
        "ascii"
    ) + b">"


async def _transaction(
    client: aiosmtplib.SMTP,
    envelope: Envelope,
    announced: bool,
    upcoming: Envelope | None,
    account: SmtpAccount,
    enter: Callable[[str], None],
) -> tuple[Reply, Envelope | None]:
    """MAIL, RCPT and DATA for one message and one recipient: pipelined when the server allows it.

    Returns the reply and the upcoming message if its commands went out behind this body.
    aiosmtplib's `sendmail` re-parses both addresses with `email.utils.parseaddr` on every
    message (a quarter of the worker's CPU); these addresses were validated and normalised
    at enqueue (ASCII, no quoting), so the commands are written directly.
    """
    commands = _envelope_commands(envelope)
    if commands is None:
        unsafe = envelope.sender if _unsafe(envelope.sender) else envelope.recipient
        raise aiosmtplib.SMTPSenderRefused(501, f"unsafe address {unsafe!r}", envelope.sender)
    mail, rcpt = commands
    protocol = enable_pipelining(client)
    if protocol is not None:
        return await _pipelined(client, protocol, envelope, (mail, rcpt), announced, upcoming, account, enter)
    response = await client.execute_command(b"MAIL", mail)
    if response.code != 250:
        raise aiosmtplib.SMTPSenderRefused(response.code, response.message, envelope.sender)
    enter("rcpt")
    response = await client.execute_command(b"RCPT", rcpt)
    if response.code not in (250, 251):
        raise aiosmtplib.SMTPRecipientRefused(response.code, response.message, envelope.recipient)
    enter("data")
    response = await client.data(envelope.content, timeout=account.data_timeout)
    return clean_reply(response.code, response.message, "data"), None


async def _many_transaction(
    client: aiosmtplib.SMTP,
    envelope: Envelope,
    account: SmtpAccount,
    enter: Callable[[str], None],
    refused: list[Refusal],
    drop: Callable[[], None],
) -> Reply:
    """One transaction per recipient's copy (MAIL with its own return path, RCPT, DATA), one command at a time.

    Each recipient gets its own message (Message-ID, unsubscribe link, VERP token), so what comes back
    from one recipient can only act for that one. Never pipelined, never announced behind another body.
    A copy refused at MAIL, RCPT or DATA is that recipient's refusal, appended to `refused`. When every
    copy is refused this raises the refusal that decides the email's fate as a single recipient's would
    (a temporary one first: a retry may reach them all); a MAIL refusal of the first copy is the
    sender's and raised at once. A 421 or a lost connection before any copy was accepted is raised (the
    email is retried whole); after one was accepted, the copies not sent are recorded as refused with
    that reply and the connection dropped: a recipient who has the message is never sent it twice.
    """
    copies = envelope.copies or tuple(
        Envelope(envelope.sender, r, envelope.message_id, envelope.content) for r in envelope.recipients
    )
    for copy in copies:
        if _unsafe(copy.sender) or _unsafe(copy.recipient):
            unsafe = copy.sender if _unsafe(copy.sender) else copy.recipient
            raise aiosmtplib.SMTPSenderRefused(501, f"unsafe address {unsafe!r}", copy.sender)
    accepted: Reply | None = None
    for index, copy in enumerate(copies):
        phase = "mail"
        try:
            enter(phase)
            response = await client.execute_command(b"MAIL", b"FROM:<" + copy.sender.encode("ascii") + b">")
            if response.code != 250:
                if index == 0 or response.code == CLOSING:
                    raise aiosmtplib.SMTPSenderRefused(response.code, response.message, copy.sender)
                raise _Refused(response.code, response.message)
            enter(phase := "rcpt")
            response = await client.execute_command(b"RCPT", b"TO:<" + copy.recipient.encode("ascii") + b">")
            if response.code == CLOSING:
                raise aiosmtplib.SMTPRecipientRefused(response.code, response.message, copy.recipient)
            if response.code not in (250, 251):
                raise _Refused(response.code, response.message)
            enter(phase := "data")
            try:
                response = await client.data(copy.content, timeout=account.data_timeout)
            except aiosmtplib.SMTPDataError as exc:
                if exc.code == CLOSING:
                    raise
                if 200 <= exc.code < 300:
                    # DATA answered 2xx instead of 354 (or 2xx other than 250 at its end): not a send.
                    raise _Refused(None, f"unexpected reply {exc.code} {exc.message}") from None
                raise _Refused(exc.code, exc.message) from None
            accepted = clean_reply(response.code, response.message, "data")
        except _Refused as exc:
            refused.append((copy.recipient, clean_reply(exc.code, exc.message, phase)))
            try:
                await client.rset()
            except (aiosmtplib.SMTPException, OSError, TimeoutError) as lost:
                if accepted is not None:
                    return _rest_refused(copies[index + 1 :], lost, "mail", accepted, refused, drop)
                if index < len(copies) - 1:
                    raise
                drop()  # every copy refused: the refusal that decides is raised below
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            if accepted is None:
                raise
            return _rest_refused(copies[index:], exc, phase, accepted, refused, drop)
    if accepted is not None:
        return accepted
    _address, deciding = next(
        ((a, r) for a, r in refused if r.code is not None and 400 <= r.code < 500), refused[0]
    )
    raise _refusal(deciding, _address)


class _Refused(Exception):
    """One copy refused by the server: that recipient's refusal, not the session's."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _rest_refused(
    rest: tuple[Envelope, ...],
    exc: BaseException,
    phase: str,
    accepted: Reply,
    refused: list[Refusal],
    drop: Callable[[], None],
) -> Reply:
    """The session ended after a copy was accepted: the copies not sent are refused with its reply."""
    code = exc.code if isinstance(exc, aiosmtplib.SMTPResponseException) else None
    text = (
        exc.message if isinstance(exc, aiosmtplib.SMTPResponseException) else f"{type(exc).__name__}: {exc}"
    )
    reply = clean_reply(code, text.strip(), phase)
    refused.extend((copy.recipient, reply) for copy in rest)
    drop()
    return accepted


def _refusal(reply: Reply, address: str) -> aiosmtplib.SMTPResponseException:
    """The exception that stands for a recipient's refusal in the phase it happened."""
    code = reply.code if reply.code is not None else 451
    if reply.phase == "mail":
        return aiosmtplib.SMTPSenderRefused(code, reply.text, address)
    if reply.phase == "data":
        return aiosmtplib.SMTPDataError(code, reply.text)
    return aiosmtplib.SMTPRecipientRefused(code, reply.text, address)


async def _pipelined(
    client: aiosmtplib.SMTP,
    protocol: PipeliningProtocol,
    envelope: Envelope,
    commands: tuple[bytes, bytes],
    announced: bool,
    upcoming: Envelope | None,
    account: SmtpAccount,
    enter: Callable[[str], None],
) -> tuple[Reply, Envelope | None]:
    """RFC 2920: MAIL, RCPT and DATA in one write (or behind the previous body), their three replies,
    then the body, with the upcoming message's MAIL, RCPT and DATA behind it, and its reply.

    Raises the same errors as the command-by-command path, so `SmtpConnection._send` treats a
    refusal the same way: every reply is read before raising, so RSET finds the session in step.
    """
    mail, rcpt = commands
    try:
        replies = await _read_group(protocol, announced, (b"MAIL " + mail, b"RCPT " + rcpt, b"DATA"), account)
    except (aiosmtplib.SMTPServerDisconnected, aiosmtplib.SMTPTimeoutError):
        client.close()  # a lost or late reply leaves the session out of step, as in aiosmtplib
        # Which reply never came says whose fault it is: MAIL's the sender's, RCPT's and DATA's the email's.
        enter(("mail", "rcpt", "data")[min(protocol.group_read, 2)])
        raise
    if replies[-1].code == CLOSING:
        client.close()  # as aiosmtplib does after a 421 to a single command
    if replies[0].code != 250:
        _refused_data(client, replies)
        raise aiosmtplib.SMTPSenderRefused(replies[0].code, replies[0].message, envelope.sender)
    enter("rcpt")
    if replies[1].code not in (250, 251):
        _refused_data(client, replies)
        raise aiosmtplib.SMTPRecipientRefused(replies[1].code, replies[1].message, envelope.recipient)
    enter("data")
    if replies[2].code != 354:
        raise aiosmtplib.SMTPDataError(replies[2].code, replies[2].message)
    try:
        then = _envelope_commands(upcoming) if upcoming is not None else None
        trailer = (b"MAIL " + then[0], b"RCPT " + then[1], b"DATA") if then is not None else ()
        enter("data")
        response = await protocol.send_body(envelope.content, account.data_timeout, trailer)
    except (aiosmtplib.SMTPServerDisconnected, aiosmtplib.SMTPTimeoutError):
        client.close()  # a lost or late reply leaves the session out of step, as in aiosmtplib
        raise
    if response.code == CLOSING:
        client.close()
        return clean_reply(response.code, response.message, "data"), None
    # The transaction is over whatever the reply (no RSET needed): the announced commands stand.
    return clean_reply(response.code, response.message, "data"), upcoming if trailer else None


async def _read_group(
    protocol: PipeliningProtocol, announced: bool, commands: tuple[bytes, ...], account: SmtpAccount
) -> list[SMTPResponse]:
    """The replies to MAIL, RCPT and DATA: owed already (announced behind the last body), or asked now."""
    if announced and protocol.announced:
        return await protocol.read_announced(account.command_timeout)
    return await protocol.execute_pipeline(commands, account.command_timeout)


def _refused_data(client: aiosmtplib.SMTP, replies: list[SMTPResponse]) -> None:
    """MAIL or RCPT was refused yet DATA got 354: the server now expects a body, so hang up instead."""
    if len(replies) == 3 and replies[2].code == 354:
        client.close()
