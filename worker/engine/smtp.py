"""SMTP delivery over aiosmtplib: one persistent connection per slot, reset after anything unexpected."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aiosmtplib
from aiosmtplib.response import SMTPResponse

from worker.core.message import Envelope
from worker.core.plaintext import PLAINTEXT_LOGIN_REFUSED, login_in_clear
from worker.engine.attempts import Attempt, SmtpAccount
from worker.engine.classify import Reply, clean_reply
from worker.engine.copies import Progress, send_copies, unsafe_address
from worker.engine.oauth import TokenCache, TokenRefused, TokenUnavailable
from worker.engine.pipelining import CLOSING, PipeliningProtocol, adopt, enable_pipelining

__all__ = ["Attempt", "SmtpAccount", "SmtpConnection"]  # the first two live in worker.engine.attempts

log = logging.getLogger(__name__)


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
        if client.protocol is not None:
            adopt(client.protocol)  # replies read into the connection's own buffer (see pipelining)
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
            progress = Progress()
            reply = await self._send(envelope, None, progress)
            duration_ms = int((time.perf_counter() - started) * 1000)
            return Attempt(reply, duration_ms, tuple(progress.refused), True, tuple(progress.accepted))
        if upcoming is not None and upcoming.recipients:
            upcoming = None  # a many-recipient message is never announced (see `worker.engine.copies`)
        reply = await self._send(envelope, upcoming)
        return Attempt(reply=reply, duration_ms=int((time.perf_counter() - started) * 1000))

    async def _send(
        self, envelope: Envelope, upcoming: Envelope | None, progress: Progress | None = None
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
            if progress is not None:
                return await send_copies(client, envelope, self.account.data_timeout, self._enter, progress)
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


def _envelope_commands(envelope: Envelope) -> tuple[bytes, bytes] | None:
    """MAIL and RCPT arguments for a message, or None when an address could not be written safely."""
    if unsafe_address(envelope.sender) or unsafe_address(envelope.recipient):
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
        unsafe = envelope.sender if unsafe_address(envelope.sender) else envelope.recipient
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
