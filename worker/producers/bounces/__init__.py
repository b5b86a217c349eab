"""Bounces and complaints (reference 05): DSNs and ARF reports sent back to an email's VERP return path.

`parse` reads a message (RFC 3464, RFC 5965, common plain-text bounces) and never raises; `intake`
finds the email it is about and applies it in one transaction, or quarantines it; `effects` holds the
changes (event row, bounce list, `bounced` status, complaint notice); `receiver` is the SMTP server;
`mailbox` polls a bounce mailbox over IMAP or POP3; `digest` tells the administrators of new complaints.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The channel a new complaint is notified on (`effects`) and the complaint digest listens to.
COMPLAINTS_CHANNEL = "mailroom_complaints"

if TYPE_CHECKING:
    from worker.producers.bounces.effects import QUARANTINE_CAP
    from worker.producers.bounces.intake import Outcome, ingest
    from worker.producers.bounces.parse import RecipientReport, Report, Unparseable, parse_report

# The rest is loaded when first asked for: the worker's complaint digest, a module of this package,
# needs none of it (parsing and intake are the receiver's and the mailbox poller's).
_LAZY = {
    "QUARANTINE_CAP": "effects",
    "Outcome": "intake",
    "ingest": "intake",
    "RecipientReport": "parse",
    "Report": "parse",
    "Unparseable": "parse",
    "parse_report": "parse",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "COMPLAINTS_CHANNEL",
    "QUARANTINE_CAP",
    "Outcome",
    "RecipientReport",
    "Report",
    "Unparseable",
    "ingest",
    "parse_report",
]
