"""A parsed report kept once per organisation and report id, and only for a From domain of our sender accounts.

A report about a domain no sender account sends from is refused, not kept flagged: anyone can mail a
report about any domain to the dmarc@ address, and keeping them would let strangers fill the table.
The policy domain counts as ours when it is a sender's From domain or a parent of one that is not a
public suffix (a policy published at example.com covers mail from news.example.com; "com" or "co.uk"
cover nothing). A record's own From domain does not make a report ours: our domains are public, so
that would let anyone who names one store a report.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from worker.producers.dmarc.limits import ReportRefused
from worker.producers.dmarc.parse import AggregateReport, AuthResult

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

ArrivedBy = Literal["cli", "receiver", "mailbox"]

SENDER_DOMAINS = """
SELECT DISTINCT lower(split_part(from_email, '@', 2)) FROM mailroom.sender_accounts WHERE from_email LIKE '%%@%%'
"""
INSERT_REPORT = """
INSERT INTO mailroom.dmarc_reports (org_name, report_id, org_email, domain, begins_at, ends_at, policy,
    subdomain_policy, percent, adkim, aspf, messages, arrived_by)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT ON CONSTRAINT dmarc_reports_one_per_org_and_id DO NOTHING
RETURNING id
"""
COPY_RECORDS = """
COPY mailroom.dmarc_records (report, position, source_ip, messages, disposition, dkim_aligned, spf_aligned,
    header_from, envelope_from, auth_results) FROM STDIN
"""


@dataclass(frozen=True)
class Stored:
    """What became of a report: `new` (with its row id) or seen before."""

    new: bool
    id: int | None
    report: AggregateReport

    def summary(self) -> str:
        """One line for people (and the logs): which report, its domain and size."""
        r = self.report
        what = "stored" if self.new else "seen before, unchanged"
        return (
            f"DMARC report {r.report_id} from {r.org_name} for {r.domain} "
            f"({len(r.records)} records, {r.messages} messages): {what}"
        )


def sender_domains(conn: psycopg.Connection[Any]) -> frozenset[str]:
    """The From domains of every sender account."""
    rows = conn.execute(SENDER_DOMAINS).fetchall()
    return frozenset(str(_first(r)) for r in rows if _first(r))


def _first(row: Any) -> Any:
    return row[0] if isinstance(row, tuple) else next(iter(row.values()))


def is_ours(report: AggregateReport, domains: frozenset[str]) -> bool:
    """Whether the report is about mail in the name of one of `domains` (see the module's rule)."""
    policy = report.domain
    if policy in domains:
        return True
    return any(d.endswith("." + policy) for d in domains) and not _public_suffix(policy)


def _public_suffix(domain: str) -> bool:
    """Whether `domain` is one under which anyone may register (com, co.uk, github.io, ...)."""
    return bool(_suffixes().is_public(domain))


@functools.cache
def _suffixes() -> PublicSuffixList:
    """The public suffix list (it comes with checkdmarc and parsedmarc), read once a process."""
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def store_report(conn: psycopg.Connection[Any], report: AggregateReport, arrived_by: ArrivedBy) -> Stored:
    """Insert the report and its records in one transaction; `ReportRefused` when its domain is not ours."""
    with conn.transaction():
        if not is_ours(report, sender_domains(conn)):
            raise ReportRefused(
                f"the report is for {report.domain}, which is not the From domain of any sender account "
                "(add the sender first: `mailroom senders add`)"
            )
        row = conn.execute(
            INSERT_REPORT,
            (
                report.org_name,
                report.report_id,
                report.org_email,
                report.domain,
                report.begins_at,
                report.ends_at,
                report.policy,
                report.subdomain_policy,
                report.percent,
                report.adkim,
                report.aspf,
                report.messages,
                arrived_by,
            ),
        ).fetchone()
        if row is None:
            return Stored(False, None, report)
        report_row = int(_first(row))
        with conn.cursor().copy(COPY_RECORDS) as copy:
            for position, r in enumerate(report.records):
                copy.write_row(
                    (
                        report_row,
                        position,
                        r.source_ip,
                        r.messages,
                        r.disposition,
                        r.dkim_aligned,
                        r.spf_aligned,
                        r.header_from,
                        r.envelope_from,
                        Jsonb({"dkim": _results(r.dkim, "selector"), "spf": _results(r.spf, "scope")}),
                    )
                )
    return Stored(True, report_row, report)


def _results(results: tuple[AuthResult, ...], detail: str) -> list[dict[str, str | None]]:
    return [{"domain": a.domain, "result": a.result, detail: a.detail} for a in results]
