"""The bounce receiver: an SMTP server (aiosmtpd) for the bounce domains only, feeding `intake.ingest`.

Never an open relay: RCPT to any other domain is refused `550 5.7.1`. The domains are the ones given,
plus (with `SenderDomains`) every sender account's own bounce domain, read again every half minute so
a sender added while the receiver runs is served. SIZE is advertised and
enforced; each client network gets a token bucket of messages; a message is answered one neutral
250 once it is in intake, whatever became of it (recorded, duplicate, ignored or quarantined: the
reply must not tell a prober which address or token is real), and 451 (try again later) when the
database cannot take it, so the sending MTA keeps it. No input and no failure of the database stops
the server; a client cannot hold it either (`ReceiverLimits`: connections per client network, an
idle timeout, few non-mail commands and a bounded number of messages per session).

Mail to dmarc@ (DMARC aggregate reports, which anyone can send and which cost more to read than a
bounce) goes through a lane of its own (`ReportLane`): one report read at a time on a thread of its
own, a few more waiting, and past that 451 (the reporter's MTA tries later). Bounces and complaints go on
the default executor, so they never queue behind reports.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session

from worker.core.config import Settings
from worker.core.connection_gate import ConnectionGate, client_key
from worker.core.failover import DatabaseCircuit, database_unavailable
from worker.core.masking import mask_address, mask_addresses
from worker.core.rate_limit import RateLimiter as RateLimiter  # where callers found it
from worker.producers.bounces.intake import Outcome
from worker.producers.dmarc.intake import is_report_address

log = logging.getLogger(__name__)

# (message, envelope recipients, the client's network as `client_key` counts it)
Processor = Callable[[bytes, list[str], str], Outcome]

SENDER_DOMAINS = "SELECT DISTINCT bounce_domain FROM mailroom.sender_accounts WHERE bounce_domain IS NOT NULL"

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
MAX_RECIPIENTS = 20  # a DSN has one envelope recipient; more is somebody probing
# The one reply to every message taken into intake: the outcome is logged, never told to the sender.
ACCEPTED = "250 2.0.0 OK: message accepted"
REPORTS_BUSY = "451 4.3.2 Too many DMARC reports at once, try again later"
TRY_LATER = "451 4.3.0 Temporary failure, try again later"
REFUSED_CONNECTION = b"421 4.7.0 Too many connections from your network, try again later\r\n"
# Commands that move no mail; a session needs a handful at most (EHLO, perhaps a RSET between
# messages). aiosmtpd answers the one past its budget `421 4.7.0` and closes the connection.
NON_MAIL_COMMANDS = ("NOOP", "RSET", "HELO", "EHLO", "HELP", "VRFY", "EXPN", "AUTH", "STARTTLS")


@dataclass(frozen=True)
class ReceiverLimits:
    """What one client may hold: connections per client network (0: no cap), seconds a session may
    wait between commands (and for one whole DATA), each non-mail command and messages per session."""

    connections_per_client: int = 20
    timeout_seconds: float = 60.0
    non_mail_commands: int = 10
    messages_per_session: int = 20

    @classmethod
    def from_settings(cls, settings: Settings) -> ReceiverLimits:
        """The limits `MAILROOM_RECEIVER_*` set."""
        return cls(
            connections_per_client=settings.receiver_max_connections_per_client,
            timeout_seconds=settings.receiver_timeout_seconds,
            non_mail_commands=settings.receiver_max_non_mail_commands,
            messages_per_session=settings.receiver_max_messages_per_session,
        )

    def command_call_limit(self) -> dict[str, int]:
        """aiosmtpd's per-session budget of each command."""
        budget = {command: self.non_mail_commands for command in NON_MAIL_COMMANDS}
        budget["MAIL"] = budget["DATA"] = self.messages_per_session
        budget["RCPT"] = self.messages_per_session * MAX_RECIPIENTS
        budget["*"] = self.non_mail_commands  # QUIT and anything unknown
        return budget


class SenderDomains:
    """The sender accounts' own bounce domains, read with `read` at most every `ttl` seconds; when the
    database cannot answer, the last ones read stay (a bounce is never refused for an outage: 451)."""

    def __init__(
        self,
        read: Callable[[], frozenset[str]],
        ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = read
        self.ttl = ttl
        self.clock = clock
        self.domains: frozenset[str] = frozenset()
        self.read_at: float | None = None
        self.failed = False

    async def get(self) -> frozenset[str]:
        """The domains, read again when older than `ttl`."""
        if self.read_at is None or self.clock() - self.read_at >= self.ttl:
            try:
                self.domains = await asyncio.to_thread(self.read)
                self.failed = False
            except Exception as exc:  # the database is away: keep serving what was known
                log.warning("bounce receiver: sender bounce domains not read: %s", exc)
                self.failed = True
            self.read_at = self.clock()
        return self.domains


def database_sender_domains(url: str) -> Callable[[], frozenset[str]]:
    """Read the sender accounts' bounce domains on a short-lived connection."""
    import psycopg

    def read() -> frozenset[str]:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            return frozenset(str(row[0]) for row in conn.execute(SENDER_DOMAINS).fetchall())

    return read


class ReportLane:
    """Where messages to dmarc@ are processed: one at a time on a thread of their own, `waiting` more
    held; past that `run` answers None (the receiver says 451). What a report costs is then one
    report's time and memory, whatever the flood, and never a bounce's wait."""

    # A mailed report is read in well under a second (worker.producers.dmarc.limits.MAILED_LIMITS), so
    # sixteen wait seconds, not minutes; their bytes are held by the SMTP sessions in any case.
    def __init__(self, waiting: int = 16) -> None:
        self.waiting = waiting
        self.held = 0  # reports running or waiting
        self.executor: ThreadPoolExecutor | None = None

    async def run(self, process: Processor, raw: bytes, recipients: list[str], client: str) -> Outcome | None:
        """`process` the message on the lane's thread, or None when the lane is full."""
        if self.held > self.waiting:
            return None
        if self.executor is None:
            self.executor = ThreadPoolExecutor(1, thread_name_prefix="dmarc-reports")
        self.held += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, process, raw, recipients, client)
        finally:
            self.held -= 1

    def close(self) -> None:
        """Let the lane's thread end once the report it reads is done."""
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = None


@dataclass
class BounceHandler:
    """aiosmtpd hooks: refuse other domains and floods, hand each message to `process` off the loop."""

    process: Processor
    domains: frozenset[str]
    limiter: RateLimiter
    sender_domains: SenderDomains | None = None
    reports: ReportLane = field(default_factory=ReportLane)
    # After repeated database failures the receiver answers 451 at once for a while (the sending MTA
    # keeps the message and tries later) instead of trying each one.
    circuit: DatabaseCircuit = field(default_factory=lambda: DatabaseCircuit("bounce-receiver"))
    received: int = 0
    outcomes: list[str] = field(default_factory=list)

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options: list[str]
    ) -> str:
        """Refuse a client over its rate (450: its MTA tries later), else take the sender."""
        client = _client(session)
        if not self.limiter.allow(client):
            log.warning("bounce receiver: %s over its rate limit", client)
            return "450 4.7.1 Too many messages, try again later"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        """Accept recipients on the bounce domains only."""
        local, at, domain = address.rpartition("@")
        if not at or not local:
            return "553 5.1.3 Bad recipient address syntax"
        if not await self._serves(domain.lower().rstrip(".")):
            if self.sender_domains is not None and self.sender_domains.failed:
                return TRY_LATER  # perhaps a sender's domain
            log.info("bounce receiver: refused relay to %s", mask_address(address))
            return "550 5.7.1 Relay denied"
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def _serves(self, domain: str) -> bool:
        if domain in self.domains:
            return True
        return self.sender_domains is not None and domain in await self.sender_domains.get()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        """Process the message and answer the neutral 250; 451 if it could not be stored, so the sender keeps it."""
        raw = envelope.original_content or b""
        if isinstance(envelope.content, bytes) and not raw:
            raw = envelope.content
        recipients = [str(r) for r in envelope.rcpt_tos]
        if self.circuit.opened and self.circuit.wait_seconds() > 0:
            return TRY_LATER  # the circuit said so in the log when it opened
        try:
            if any(is_report_address(r) for r in recipients):
                outcome = await self.reports.run(self.process, bytes(raw), recipients, _client(session))
                if outcome is None:
                    log.warning(
                        "bounce receiver: DMARC report from %s put off, the lane is full", _client(session)
                    )
                    return REPORTS_BUSY
            else:
                outcome = await asyncio.to_thread(self.process, bytes(raw), recipients, _client(session))
        except Exception as exc:  # a database outage or a bug: the sending MTA retries later
            if database_unavailable(exc):
                self.circuit.failed(exc)  # said once for the outage, not once a message
            else:
                log.exception("bounce receiver: message to %s not stored", mask_addresses(recipients))
            return TRY_LATER
        self.circuit.succeeded()
        self.received += 1
        self.outcomes.append(outcome.verdict)
        del self.outcomes[:-100]
        log.info("bounce receiver: message from %s %s", _client(session), outcome.verdict)
        return ACCEPTED


def _client(session: Session) -> str:
    """The client's network as the limits count it."""
    peer = session.peer
    return client_key(str(peer[0])) if isinstance(peer, tuple) and peer else str(peer)


class BounceServer:
    """A listening bounce receiver on the current event loop."""

    def __init__(
        self,
        handler: BounceHandler,
        host: str,
        port: int,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        limits: ReceiverLimits | None = None,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.max_bytes = max_bytes
        self.limits = limits or ReceiverLimits()
        self.gate = ConnectionGate(self.limits.connections_per_client, REFUSED_CONNECTION)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        """Listen and return the bound port (port 0 picks a free one)."""
        loop = asyncio.get_running_loop()

        def protocol() -> Any:
            # No STARTTLS is offered: it would swap the transport's protocol past the gate's count.
            return SMTP(
                self.handler,
                data_size_limit=self.max_bytes,
                ident="Mailroom bounce receiver",
                timeout=self.limits.timeout_seconds,
                command_call_limit=self.limits.command_call_limit(),
                loop=loop,
            )

        # aiosmtpd logs every envelope address unmasked at INFO: keep only its warnings.
        logging.getLogger("mail.log").setLevel(logging.WARNING)
        self._server = await loop.create_server(self.gate.protocol(protocol), host=self.host, port=self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info(
            "bounce receiver on %s:%d for %s, messages up to %d bytes",
            self.host,
            self.port,
            ", ".join(sorted(self.handler.domains)),
            self.max_bytes,
        )
        return self.port

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.handler.reports.close()


def database_processor(url: str, key: bytes, bounce_domain: str | None = None) -> Processor:
    """Process each message on a connection of its own (bounces are few; a restart of PostgreSQL is harmless)."""
    import psycopg

    from worker.producers.bounces.intake import ingest
    from worker.producers.dmarc.intake import addressed_to_dmarc, ingest_report

    def process(raw: bytes, recipients: list[str], client: str) -> Outcome:
        # `client` is the peer's network (an IPv4 address or IPv6 /64): the quarantine's per-client
        # limit then counts an IPv6 sender once, not once per address of its /64
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            if addressed_to_dmarc(raw, recipients):  # dmarc@ a bounce domain: a DMARC report, not a DSN
                return ingest_report(conn, raw, "receiver", recipients, client=client)
            return ingest(conn, raw, key, recipients, client=client, bounce_domain=bounce_domain)

    return process
