"""Masking of e-mail addresses for log lines, so logs never carry a full recipient address."""

from __future__ import annotations

import re
from collections.abc import Iterable

_VISIBLE = 3
# The domain an erased address is rewritten to (`mailroom privacy erase`); never deliverable.
ERASED_DOMAIN = "erased.invalid"
_MASK = "***"


def mask_address(addr: str) -> str:
    """Mask an address for logging: up to three leading local-part characters, then ``***@domain``."""
    local, at, domain = addr.strip().rpartition("@")
    if not at:
        # Not an address at all: treat the whole text as a local part and reveal no domain.
        local, domain = addr.strip(), ""
    # Never reveal a whole local part: "bob" -> "bo***", "al" -> "a***", "x" -> "***".
    visible = local[: max(0, min(_VISIBLE, len(local) - 1))]
    return f"{visible}{_MASK}@{domain}" if at else f"{visible}{_MASK}"


def mask_addresses(addrs: Iterable[str]) -> str:
    """Mask several addresses and join them with ", " for a single log line."""
    return ", ".join(mask_address(addr) for addr in addrs)


# An address inside free text (a reply echoing "<ada@example.com>: Recipient address rejected").
_ADDRESS_IN_TEXT = re.compile(
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)+"
)


def mask_addresses_in(text: str) -> str:
    """Mask every e-mail address inside free text (server replies echo them), leaving the rest as it is."""
    return _ADDRESS_IN_TEXT.sub(lambda m: mask_address(m.group(0)), text)
