"""Bounces and complaints (reference 05): DSNs and ARF reports sent back to an email's VERP return path.

`parse` reads a message (RFC 3464, RFC 5965, common plain-text bounces) and never raises; `intake`
finds the email it is about and applies it in one transaction, or quarantines it; `effects` holds the
changes (event row, bounce list, `bounced` status, complaint notice); `receiver` is the SMTP server;
`mailbox` polls a bounce mailbox over IMAP or POP3; `digest` tells the administrators of new complaints.
"""

from worker.producers.bounces.effects import COMPLAINTS_CHANNEL, QUARANTINE_CAP
from worker.producers.bounces.intake import Outcome, ingest
from worker.producers.bounces.parse import RecipientReport, Report, Unparseable, parse_report

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
