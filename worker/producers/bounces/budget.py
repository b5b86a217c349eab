"""What reading one bounce or complaint may cost, and the checks that stop it before it costs more.

Parsing untrusted mail must cost linear time and bounded memory: the `email` parser's cost grows with
lines times nesting, so the structure is counted before parsing and the parts after, and a message
past its `Budget` is "over budget": quarantined, never retried.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message

OVER_BUDGET = "over budget"


@dataclass(frozen=True)
class Budget:
    """What reading one message may cost; past any of these it is `Unparseable`, "over budget"."""

    # bytes of the message parsed: a DSN's status comes first, the rest is the returned original's tail
    parse_bytes: int = 2 << 20
    # `boundary=` parameters and `Content-Type` headers before parsing (the parser's cost grows with nesting)
    boundaries: int = 64
    content_types: int = 256
    parts: int = 256  # MIME parts once parsed
    depth: int = 16  # nesting of multiparts and returned messages
    text_chars: int = 1 << 20  # decoded text of a plain bounce searched
    recipients: int = 100  # recipient reports (a DSN has one field block per recipient)
    message_ids: int = 10  # Message-IDs of returned originals looked up
    addresses: int = 50  # addresses the report was sent to (where a return-path token may be)


DEFAULT_BUDGET = Budget()


class OverBudget(Exception):
    """Reading the message would cost more than its `Budget`."""


def check_structure(raw: bytes, budget: Budget) -> None:
    """Refuse, before parsing, a message whose structure alone would cost too much to parse.

    The `email` parser checks every line against the boundary of every enclosing multipart, so its
    cost is lines times depth; nested returned messages recurse. Counting the declarations bounds both.
    """
    lower = raw.lower()
    if lower.count(b"boundary") > budget.boundaries:
        raise OverBudget(f"more than {budget.boundaries} multipart boundaries")
    if lower.count(b"content-type") > budget.content_types:
        raise OverBudget(f"more than {budget.content_types} Content-Type headers")
    if lower.count(b"final-recipient") > budget.recipients:
        raise OverBudget(f"more than {budget.recipients} recipient reports")


def check_parts(msg: Message, budget: Budget) -> None:
    """Count the parts without recursion, stopping at the budget."""
    count = 0
    stack: list[tuple[Message, int]] = [(msg, 0)]
    while stack:
        part, depth = stack.pop()
        count += 1
        if count > budget.parts:
            raise OverBudget(f"more than {budget.parts} MIME parts")
        if depth > budget.depth:
            raise OverBudget(f"MIME parts nested more than {budget.depth} deep")
        payload = part.get_payload()
        if part.is_multipart() and isinstance(payload, list):
            stack.extend((p, depth + 1) for p in payload if isinstance(p, Message))
