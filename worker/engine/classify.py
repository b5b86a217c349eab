"""What an SMTP reply means for the email, the address and the sender account."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import cached_property

_ENHANCED = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})\b")


class Verdict(enum.Enum):
    """The fate of one attempt."""

    SENT = "sent"
    TRANSIENT = "transient"  # retry with backoff
    PERMANENT = "permanent"  # fail the email, keep the address
    BOUNCE = "bounced"  # fail the email and put the address on the bounce list
    AUTH = "auth_failed"  # suspend the sender account, return the email uncharged
    SENDER = "sender_unreachable"  # the relay's fault: open the sender's circuit, return the email uncharged
    LOCAL = "local_error"  # our own command was refused: never the address's fault


@dataclass(frozen=True)
class Reply:
    """One SMTP outcome: the reply code (None when no reply came: timeout, dropped connection) and text."""

    code: int | None
    text: str
    phase: str = "data"  # connect, token (an OAuth2 token endpoint's refusal), auth, mail, rcpt, data

    def said(self, limit: int | None = None) -> str:
        """Code and text as a person reads them: no code at all (never 'None') when no reply came."""
        text = self.text if limit is None else self.text[:limit]
        return f"{self.code} {text}" if self.code is not None else text

    @cached_property
    def enhanced(self) -> str | None:
        """The RFC 3463 enhanced status code at the start of the text, e.g. '5.1.1'."""
        match = _ENHANCED.match(self.text)
        return ".".join(match.groups()) if match else None


# Enhanced codes about the *sender's* address (5.1.7 bad sender syntax, 5.1.8 bad sender domain):
# our configuration, never the recipient's mailbox.
_SENDER_ADDRESS_CODES = ("5.1.7", "5.1.8")


def classify(reply: Reply) -> Verdict:
    """Map a reply to a verdict by the phase it answered, its code and its enhanced status code.

    Only a 2xx to the end of DATA is a send. Before MAIL FROM, every failure is the relay's or the
    sender's: `AUTH` (suspend) for an authentication answered with anything but 235 (RFC 4954) or an
    OAuth2 token endpoint's refusal, `SENDER` (circuit) for the rest. A refused MAIL FROM is the sender's too, unless the message is
    too big. RCPT and DATA replies are about the email and its recipient.
    """
    code, phase = reply.code, reply.phase
    if phase == "data" and code is not None and 200 <= code < 300:
        return Verdict.SENT
    if phase == "auth":
        return Verdict.SENDER if code is None else Verdict.AUTH
    if phase == "token":
        return Verdict.AUTH  # the OAuth2 token endpoint refused the client or its grant
    if phase == "connect":
        return Verdict.SENDER
    if code in (530, 535):
        return Verdict.AUTH  # authentication required or refused, whatever the phase
    if phase == "mail":
        return Verdict.PERMANENT if _too_big(reply) else Verdict.SENDER
    return _recipient_verdict(reply)


def _too_big(reply: Reply) -> bool:
    return reply.code == 552 or reply.enhanced == "5.3.4"


def _recipient_verdict(reply: Reply) -> Verdict:
    """RCPT and DATA: what the reply says about this email and its recipient."""
    code, enhanced = reply.code, reply.enhanced
    if code is None or 400 <= code < 500 or 200 <= code < 300:
        # No reply (timeout, dropped connection) or a temporary refusal: retry. A 2xx here answered
        # something other than the end of DATA (DATA itself, say), so nothing was sent.
        return Verdict.TRANSIENT
    if enhanced in _SENDER_ADDRESS_CODES:
        return Verdict.LOCAL  # our sender address was refused: never the recipient's fault
    if code in (500, 501, 502, 503, 504) and not (enhanced or "").startswith("5.1."):
        return Verdict.LOCAL
    if _too_big(reply):
        return Verdict.PERMANENT  # message too big: the message's fault, not the mailbox's
    if "relay" in reply.text.lower():
        return Verdict.PERMANENT  # relaying denied: a routing problem, not a bad mailbox
    if enhanced is not None:
        return Verdict.BOUNCE if enhanced.startswith("5.1.") else Verdict.PERMANENT
    if reply.phase == "rcpt" and code in (550, 551, 553):
        return Verdict.BOUNCE
    return Verdict.PERMANENT


def clean_reply(code: int | None, text: str, phase: str) -> Reply:
    """A reply safe to store: codes outside 200-599 count as no reply, text loses NULs and undecodable bytes."""
    if code is not None and not 200 <= code <= 599:
        text = f"malformed reply (code {code}): {text}"
        code = None
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")
    return Reply(code, text, phase)


def backoff_seconds(retry_count: int, base: float, cap: float, unit_random: float) -> float:
    """Exponential backoff with equal jitter: base * 2**retry_count, capped, then between half and all of it."""
    ceiling = min(cap, base * (2.0 ** min(retry_count, 32)))
    return ceiling / 2 + ceiling / 2 * unit_random
