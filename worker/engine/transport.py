"""What a slot sends through: an SMTP connection, or the Gmail API for a Gmail API sender account."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from worker.core.message import Envelope
    from worker.engine.attempts import Attempt, SmtpAccount


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


class Deferred:
    """A slot's transport made when it first sends (by `make`, from the account): a claim that finds
    nothing due, what a short `worker --drain` mostly meets, then loads no SMTP or HTTP client."""

    def __init__(self, account: SmtpAccount, make: Callable[[SmtpAccount], Transport]) -> None:
        self.account = account
        self._make = make
        self._made: Transport | None = None

    async def send(self, envelope: Envelope, upcoming: Envelope | None = None) -> Attempt:
        """Send through the transport, made first if need be."""
        if self._made is None:
            self._made = self._make(self.account)
        return await self._made.send(envelope, upcoming)

    async def close(self) -> None:
        """Let go of the transport, if one was made."""
        if self._made is not None:
            await self._made.close()

    def forget_announced(self) -> None:
        """As the transport's, if one was made."""
        if self._made is not None:
            self._made.forget_announced()
