"""DMARC aggregate reports (RFC 7489 section 7.2): what mailbox providers say about mail in our domains' names.

`extract` finds the report's XML in what arrived (XML, .xml.gz, .zip, or an email carrying one) under
size caps; `xmlcheck` refuses DTDs and entities and checks the XML's shape before parsedmarc reads it
(`parse`, offline: no DNS, no network); `store` keeps a report once per organisation and report id,
and only for a From domain of a sender account; `intake` routes mail sent to dmarc@ a bounce domain;
`summary` answers `mailroom dmarc report` and the console.
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
