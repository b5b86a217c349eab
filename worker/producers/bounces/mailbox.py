"""A bounce mailbox polled over IMAP or POP3: each message processed by `intake.ingest`, then removed.

A message is deleted (POP3 DELE; IMAP moved to a folder, or flagged \\Deleted and expunged) only
after it is recorded, recognised as seen before, ignored or quarantined; one whose processing failed
stays in the mailbox for the next poll, and a database that cannot be reached ends the poll. TLS is
the default (implicit, or STARTTLS) with the certificate verified; plain text is for loopback only.
"""

from __future__ import annotations

import imaplib
import ipaddress
import logging
import poplib
import re
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal

from worker.producers.bounces.intake import Outcome

log = logging.getLogger(__name__)

Protocol = Literal["imap", "pop3"]
Security = Literal["tls", "starttls", "none"]
Processor = Callable[[bytes], Outcome]

DEFAULT_PORTS: dict[tuple[Protocol, bool], int] = {
    ("imap", True): 993,
    ("imap", False): 143,
    ("pop3", True): 995,
    ("pop3", False): 110,
}


class MailboxError(Exception):
    """The mailbox could not be reached, secured, logged into or read."""


class DatabaseUnavailable(Exception):
    """The database could not take a message: the poll stops and the message stays."""


@dataclass(frozen=True)
class Mailbox:
    """Where the bounces are and how to reach them."""

    protocol: Protocol
    host: str
    user: str
    password: str
    port: int | None = None
    security: Security = "tls"
    cafile: str | None = None
    folder: str = "INBOX"
    move_to: str | None = None
    max_messages: int = 100
    timeout: float = 30.0

    @property
    def address(self) -> tuple[str, int]:
        """Host and port, the protocol's default port when none was given."""
        return self.host, self.port or DEFAULT_PORTS[(self.protocol, self.security == "tls")]


@dataclass
class PollResult:
    """What one poll did."""

    fetched: int = 0
    deleted: int = 0
    failed: int = 0
    remaining: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None

    def count(self, outcome: Outcome) -> None:
        """Tally one processed message."""
        self.verdicts[outcome.verdict] = self.verdicts.get(outcome.verdict, 0) + 1

    def summary(self) -> str:
        """One line for people."""
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(self.verdicts.items())) or "nothing to process"
        text = f"{self.fetched} fetched ({verdicts}), {self.deleted} deleted"
        if self.failed:
            text += f", {self.failed} left after a failure"
        if self.remaining:
            text += f", {self.remaining} more waiting"
        return text


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine (plain text is allowed there only)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tls_context(cafile: str | None) -> ssl.SSLContext:
    """A client context that verifies the certificate and host name (against `cafile` when given)."""
    context = ssl.create_default_context(cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def poll(mailbox: Mailbox, process: Processor) -> PollResult:
    """Fetch up to `max_messages` messages, process each, delete those processed."""
    if mailbox.security == "none" and not is_loopback(mailbox.host):
        raise MailboxError(f"plain text (no TLS) is refused for {mailbox.host}: only for 127.0.0.1")
    try:
        if mailbox.protocol == "imap":
            return _poll_imap(mailbox, process)
        return _poll_pop3(mailbox, process)
    except (imaplib.IMAP4.error, poplib.error_proto) as exc:
        raise MailboxError(f"{mailbox.protocol} {mailbox.host}: {_text(exc)}") from None
    except (OSError, EOFError) as exc:  # refused, timed out, TLS failed (ssl.SSLError is an OSError)
        raise MailboxError(f"{mailbox.protocol} {mailbox.host}:{mailbox.address[1]}: {exc}") from None


def _text(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


def _handle(result: PollResult, process: Processor, raw: bytes, where: str) -> bool | None:
    """Process one message: True to delete it, False to leave it, None to leave it and stop the poll."""
    result.fetched += 1
    try:
        outcome = process(raw)
    except DatabaseUnavailable as exc:
        result.failed += 1
        result.stopped = str(exc)
        log.warning("bounce mailbox: message %s left in the mailbox, database unavailable: %s", where, exc)
        return None
    except Exception:  # a bug on one message must not hold back the others: it stays for later
        result.failed += 1
        log.exception("bounce mailbox: message %s left in the mailbox", where)
        return False
    result.count(outcome)
    log.info("bounce mailbox: message %s %s: %s", where, outcome.verdict, outcome.detail)
    return True


# IMAP ----------------------------------------------------------------------------------------------


def _quoted(name: str) -> str:
    """A mailbox name as an IMAP quoted string (names with spaces, say)."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


@contextmanager
def _imap(mailbox: Mailbox) -> Iterator[imaplib.IMAP4]:
    host, port = mailbox.address
    client: imaplib.IMAP4
    if mailbox.security == "tls":
        context = tls_context(mailbox.cafile)
        client = imaplib.IMAP4_SSL(host, port, ssl_context=context, timeout=mailbox.timeout)
    else:
        client = imaplib.IMAP4(host, port, timeout=mailbox.timeout)
    try:
        if mailbox.security == "starttls":
            client.starttls(ssl_context=tls_context(mailbox.cafile))
        client.login(mailbox.user, mailbox.password)
        yield client
    finally:
        try:
            client.logout()
        except (imaplib.IMAP4.error, OSError, EOFError):
            with suppress(OSError):  # already broken (a refused certificate): the first error counts
                client.shutdown()


def _ok(reply: tuple[str, list[Any]], what: str) -> list[Any]:
    typ, data = reply
    if typ != "OK":
        raise imaplib.IMAP4.error(f"{what} refused: {_text(Exception(*(data or [typ])))}")
    return data


_LITERAL = re.compile(rb"BODY\[\] \{\d+\}$|RFC822 \{\d+\}$")


def _imap_message(data: list[Any]) -> bytes | None:
    """The message bytes in a UID FETCH reply (None when the server has no such UID any more)."""
    for item in data:
        if isinstance(item, tuple) and _LITERAL.search(item[0]):
            return bytes(item[1])
    return None


def _poll_imap(mailbox: Mailbox, process: Processor) -> PollResult:
    result = PollResult()
    with _imap(mailbox) as client:
        _ok(client.select(_quoted(mailbox.folder)), f"SELECT {mailbox.folder}")
        # Flagged \Deleted but not expunged (a poll cut short): recorded already, expunged below.
        uids = b" ".join(_ok(client.uid("SEARCH", "UNDELETED"), "SEARCH")).split()
        batch, result.remaining = uids[: mailbox.max_messages], max(0, len(uids) - mailbox.max_messages)
        can_move = "MOVE" in client.capabilities
        for uid in batch:
            raw = _imap_message(_ok(client.uid("FETCH", uid.decode(), "(BODY.PEEK[])"), "FETCH"))
            if raw is None:
                continue  # expunged by another client meanwhile
            verdict = _handle(result, process, raw, f"uid {uid.decode()}")
            if verdict is None:
                result.remaining += len(batch) - batch.index(uid) - 1
                break
            if verdict:
                _imap_remove(client, uid.decode(), mailbox.move_to, can_move)
                result.deleted += 1
        if not (mailbox.move_to and can_move):  # also the ones a poll cut short left flagged
            _ok(client.expunge(), "EXPUNGE")
        client.close()
    return result


def _imap_remove(client: imaplib.IMAP4, uid: str, move_to: str | None, can_move: bool) -> None:
    """Move the message to `move_to` (MOVE, else COPY), else flag it \\Deleted for the EXPUNGE."""
    if move_to and can_move:
        _ok(client.uid("MOVE", uid, _quoted(move_to)), f"MOVE to {move_to}")
        return
    if move_to:
        _ok(client.uid("COPY", uid, _quoted(move_to)), f"COPY to {move_to}")
    _ok(client.uid("STORE", uid, "+FLAGS.SILENT", r"(\Deleted)"), "STORE")


# POP3 ----------------------------------------------------------------------------------------------


@contextmanager
def _pop3(mailbox: Mailbox) -> Iterator[poplib.POP3]:
    host, port = mailbox.address
    client: poplib.POP3
    if mailbox.security == "tls":
        client = poplib.POP3_SSL(host, port, context=tls_context(mailbox.cafile), timeout=mailbox.timeout)
    else:
        client = poplib.POP3(host, port, timeout=mailbox.timeout)
    try:
        if mailbox.security == "starttls":
            client.stls(context=tls_context(mailbox.cafile))
        client.user(mailbox.user)
        client.pass_(mailbox.password)
    except BaseException:
        with suppress(OSError):  # already broken (a refused certificate): the first error counts
            client.close()
        raise
    try:
        yield client
    except BaseException:
        # No QUIT: the server forgets the DELEs of this session, those messages come back next poll
        # and are recognised as seen before.
        client.close()
        raise
    # QUIT commits the DELEs (RFC 1939 UPDATE state).
    client.quit()


def _poll_pop3(mailbox: Mailbox, process: Processor) -> PollResult:
    result = PollResult()
    with _pop3(mailbox) as client:
        count, _ = client.stat()
        batch = min(count, mailbox.max_messages)
        result.remaining = count - batch
        for number in range(1, batch + 1):
            _, lines, _ = client.retr(number)
            raw = b"\r\n".join(lines) + b"\r\n"
            verdict = _handle(result, process, raw, f"#{number}")
            if verdict is None:
                result.remaining += batch - number
                break
            if verdict:
                client.dele(number)
                result.deleted += 1
    return result


# The database --------------------------------------------------------------------------------------


class DatabaseIntake:
    """`ingest` on one connection for the whole poll, opened on the first message; `client` is who the
    quarantine's per-client limit counts these messages against."""

    def __init__(
        self,
        url: str,
        key: bytes,
        connect_timeout: int = 10,
        client: str = "mailbox",
        bounce_domain: str | None = None,
    ) -> None:
        self.url = url
        self.key = key
        self.bounce_domain = bounce_domain
        self.connect_timeout = connect_timeout
        self.client = client
        self._conn: Any = None

    def __call__(self, raw: bytes) -> Outcome:
        """Process one message; DatabaseUnavailable when the database cannot take it."""
        import psycopg

        from worker.core.failover import database_unavailable, said
        from worker.producers.bounces.intake import ingest
        from worker.producers.dmarc.intake import addressed_to_dmarc, ingest_report

        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=self.connect_timeout)
            if addressed_to_dmarc(raw):  # delivered to dmarc@: a DMARC report, not a DSN
                return ingest_report(self._conn, raw, "mailbox", client=self.client)
            return ingest(self._conn, raw, self.key, client=self.client, bounce_domain=self.bounce_domain)
        except psycopg.Error as exc:
            if not database_unavailable(exc):
                raise
            self.close()  # the next poll connects anew, through the multi-host URL
            raise DatabaseUnavailable(said(exc)) from exc

    def __enter__(self) -> DatabaseIntake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection, if any."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
