"""What a slot sends through and what it gets back, as plain values: a sender account's SMTP settings
and one attempt's reply. Kept apart from `worker.engine.smtp`, so what only reads or records them
(the sender book, the completer, the outcomes) starts without the SMTP client (aiosmtplib)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.engine.classify import Reply, Verdict
    from worker.engine.copies import Refusal
    from worker.engine.gmail_tokens import GmailAccount
    from worker.engine.oauth import OAuthClient


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
    # A Gmail API sender (worker.engine.gmail): its email goes through the API, not to `host`.
    gmail: GmailAccount | None = None


@dataclass(frozen=True)
class Attempt:
    """The reply to one message and how long it took; for a message with several envelope recipients
    (`many`), the recipients whose copy was refused and those whose copy was accepted (the reply is
    then that of the last copy accepted, or what ended the session)."""

    reply: Reply
    duration_ms: int
    refused: tuple[Refusal, ...] = ()
    many: bool = False
    accepted: tuple[str, ...] = ()
    # What the attempt means, when the transport judged it itself (the Gmail API's answers are not SMTP
    # replies); None: `worker.engine.classify` judges the reply.
    verdict: Verdict | None = None
