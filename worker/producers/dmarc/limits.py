"""What reading one DMARC report may cost, and the one error every refusal raises.

A report is untrusted input from anyone who can send mail: each cap is checked before the work it
bounds (the compressed size before decompressing, the decompressed bytes while streaming, records,
elements and depth as each starts). A report that came by mail (the bounce receiver, the mailbox
poll) is held to `MAILED_LIMITS`, far lower than a file an operator hands to `mailroom dmarc ingest`:
anyone can mail one, and the receiver reads it beside the bounces.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Caps on one report; past any of them the report is refused, never half stored."""

    input_bytes: int = 10 << 20  # a file or message as it arrives (the receiver's own cap is 10 MiB)
    xml_bytes: int = 32 << 20  # the report's XML once decompressed (a large sender's day is a few MiB)
    zip_members: int = 4  # entries in a zip (a report zip holds one file)
    attachments: int = 8  # candidate report attachments looked at in one email
    records: int = 50_000  # <record> elements in one report
    elements: int = 2_000_000  # XML elements in all
    depth: int = 16  # XML nesting (a report is 5 deep)
    span_days: int = 366  # the period one report may cover
    auth_results: int = 8  # DKIM and SPF results kept per record, each


DEFAULT_LIMITS = Limits()
# A domain's day at a large provider is a few hundred records (one per source address and result);
# 5,000 records are 3 MiB of XML and a fraction of a second to read.
MAILED_LIMITS = Limits(xml_bytes=8 << 20, records=5_000, elements=250_000)


class ReportRefused(Exception):
    """The input is not a DMARC aggregate report Mailroom will store; the message says why, for people."""
