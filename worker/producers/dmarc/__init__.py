"""DMARC aggregate reports (RFC 7489 section 7.2): what mailbox providers say about mail in our domains' names.

`extract` finds the report's XML in what arrived (XML, .xml.gz, .zip, or an email carrying one) under
size caps and hands it on a piece at a time; `xmlread` reads it in one streaming expat pass (no DTD,
no entity, bounded shape, only the fields a report needs); `parse` checks those fields into typed
rows, offline (no DNS, no network), and lets the caller judge the header before any record is read;
`store` keeps a report once per organisation and report id, only for a From domain of a sender
account and within bounds; `intake` routes mail sent to dmarc@ a bounce domain and is the one way in
(`take_report`); `worker.ops.dmarc_report` answers `mailroom dmarc report` and the console.
"""

from worker.producers.dmarc.limits import DEFAULT_LIMITS, Limits, ReportRefused
from worker.producers.dmarc.parse import AggregateReport, AuthResult, Record, parse_report

__all__ = [
    "DEFAULT_LIMITS",
    "AggregateReport",
    "AuthResult",
    "Limits",
    "Record",
    "ReportRefused",
    "parse_report",
]
