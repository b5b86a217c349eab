"""Helpers of the bounce receiver tests: a clock they move by hand, and one message sent over SMTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiosmtplib

ReceiverFactory = Callable[..., Any]


class Clock:
    """A clock that stands still unless the test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def send_report(port: int, raw: bytes, to: str, sender: str = "") -> tuple[int, str]:
    """Send one message to the receiver; its reply to the end of DATA (or the refusal before it)."""
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=10) as client:
        try:
            _refused, reply = await client.sendmail(sender, [to], raw)
        except aiosmtplib.SMTPRecipientsRefused as exc:
            return exc.recipients[0].code, exc.recipients[0].message
        except aiosmtplib.SMTPResponseException as exc:
            return exc.code, exc.message
        return 250, reply
