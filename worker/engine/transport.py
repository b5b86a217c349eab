"""What a slot sends through: an SMTP connection, or the Gmail API for a Gmail API sender account."""

from __future__ import annotations

from typing import Protocol

from worker.core.message import Envelope
from worker.engine.smtp import Attempt, SmtpAccount


class Transport(Protocol):
    """One slot's way to one sender account: `worker.engine.smtp.SmtpConnection` or
    `worker.engine.gmail.GmailConnection`, used the same way by the delivery loop."""

    @property
    def account(self) -> SmtpAccount:
        """The sender account it sends for, as it was when the transport was made."""
        ...

    async def send(self, envelope: Envelope, upcoming: Envelope | None = None) -> Attempt:
        """Send one built message; network and server trouble come back as the attempt, never raised."""
        ...

    async def close(self) -> None:
        """Let go of the connection."""
        ...

    def forget_announced(self) -> None:
        """The message announced ahead will not be sent after all."""
        ...
