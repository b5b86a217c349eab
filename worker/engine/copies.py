"""An email with several recipients on the wire: one transaction per recipient's own copy.

Each recipient gets its own message (Message-ID, unsubscribe link, VERP return path: see
`worker.core.message.build_message`), so what comes back from one recipient can only act for that
one. The copies go one transaction after another, command by command (never pipelined, never
announced behind another body), so every reply is tied to its recipient beyond doubt.

- A copy refused at RCPT or DATA is that recipient's refusal (`Progress.refused`); the next copy
  follows on the same session after RSET.
- Anything that is the session's (a refusal of MAIL FROM, which is the sender's, a 421, a timeout, a
  lost connection, a failed RSET) is raised as the single-recipient path raises it, and the email's
  fate is decided as for one recipient. The copies already accepted are in `Progress.accepted`: they
  are recorded, and the retry leaves them out (the claim drops them as already delivered), so a
  recipient who has the message is never sent it twice and one who has not still gets it.
- When every copy is refused, the refusal that decides the email's fate is raised (a temporary one
  first: a retry may reach them all).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import aiosmtplib

from worker.core.message import Envelope
from worker.engine.classify import Reply, clean_reply
from worker.engine.pipelining import CLOSING

# One recipient of a many-recipient message whose copy was refused, and the reply that refused it.
Refusal = tuple[str, Reply]

# What an envelope address may not hold to be written straight into MAIL FROM:<...> or RCPT TO:<...>.
_UNSAFE = re.compile(r"[<>\r\n ]|[^\x00-\x7f]")


def unsafe_address(address: str) -> bool:
    """Whether an address could not be written into an SMTP command as it is."""
    return _UNSAFE.search(address) is not None


@dataclass
class Progress:
    """What became of each copy so far, kept whatever the session does next."""

    accepted: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


class _Refused(Exception):
    """One copy refused by the server: that recipient's refusal, not the session's."""

    def __init__(self, code: int | None, message: str, phase: str) -> None:
        super().__init__(message)
        self.reply = clean_reply(code, message, phase)


async def send_copies(
    client: aiosmtplib.SMTP,
    envelope: Envelope,
    data_timeout: float,
    enter: Callable[[str], None],
    progress: Progress,
) -> Reply:
    """Send each recipient's copy in its own transaction; the reply to the last copy accepted."""
    copies = envelope.copies or tuple(
        Envelope(envelope.sender, r, envelope.message_id, envelope.content) for r in envelope.recipients
    )
    for copy in copies:
        for address in (copy.sender, copy.recipient):
            if unsafe_address(address):
                raise aiosmtplib.SMTPSenderRefused(501, f"unsafe address {address!r}", copy.sender)
    last: Reply | None = None
    for copy in copies:
        try:
            last = await _one_copy(client, copy, data_timeout, enter)
        except _Refused as refusal:
            progress.refused.append((copy.recipient, refusal.reply))
            await client.rset()
        else:
            progress.accepted.append(copy.recipient)
    if last is not None:
        return last
    address, deciding = next(
        ((a, r) for a, r in progress.refused if r.code is not None and 400 <= r.code < 500),
        progress.refused[0],
    )
    raise _as_exception(deciding, address)


async def _one_copy(
    client: aiosmtplib.SMTP, copy: Envelope, data_timeout: float, enter: Callable[[str], None]
) -> Reply:
    """MAIL, RCPT and DATA for one copy; `_Refused` when the server refuses this recipient."""
    enter("mail")
    response = await client.execute_command(b"MAIL", b"FROM:<" + copy.sender.encode("ascii") + b">")
    if response.code != 250:
        raise aiosmtplib.SMTPSenderRefused(response.code, response.message, copy.sender)
    enter("rcpt")
    response = await client.execute_command(b"RCPT", b"TO:<" + copy.recipient.encode("ascii") + b">")
    if response.code == CLOSING:
        raise aiosmtplib.SMTPRecipientRefused(response.code, response.message, copy.recipient)
    if response.code not in (250, 251):
        raise _Refused(response.code, response.message, "rcpt")
    enter("data")
    try:
        response = await client.data(copy.content, timeout=data_timeout)
    except aiosmtplib.SMTPDataError as exc:
        if exc.code == CLOSING:
            raise
        if 200 <= exc.code < 300:
            # DATA answered 2xx instead of 354 (or 2xx other than 250 at its end): not a send.
            raise _Refused(None, f"unexpected reply {exc.code} {exc.message}", "data") from None
        raise _Refused(exc.code, exc.message, "data") from None
    return clean_reply(response.code, response.message, "data")


def _as_exception(reply: Reply, address: str) -> aiosmtplib.SMTPResponseException:
    """The exception that stands for a recipient's refusal in the phase it happened."""
    code = reply.code if reply.code is not None else 451
    if reply.phase == "data":
        return aiosmtplib.SMTPDataError(code, reply.text)
    return aiosmtplib.SMTPRecipientRefused(code, reply.text, address)
