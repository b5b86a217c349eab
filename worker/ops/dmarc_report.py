"""What the stored DMARC reports say, by From domain and source address: pass or fail, and by which alignment.

One query serves `mailroom dmarc report` and the console's DMARC screen (reports are taken in by
`worker.producers.dmarc`). A source is flagged when mail in the name
of a sender account's From domain came from it and failed DMARC (neither DKIM nor SPF aligned): an
unknown service sending as you, or one of your own that is missing a DKIM key or an SPF include.

Every figure is a claim: nothing in a report is authenticated, and anyone can mail one in any
reporter's name about our (public) From domains. Both readers say so (`CLAIMS`), mark the sources of
disputed reports (another report came with the same organisation and id but other content), and
health warns when the bounds on what is stored refuse reports (`dmarc_findings`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

CLAIMS = (
    "DMARC reports are unauthenticated claims: anyone can mail one in any reporter's name (google.com's too), "
    "so these are what the reports say, not what is verified"
)

# As worker.producers.dmarc.store reads them (the rooms stay apart): the From domains of every sender account.
SENDER_DOMAINS = """
SELECT DISTINCT lower(split_part(from_email, '@', 2)) AS domain FROM mailroom.sender_accounts
WHERE from_email LIKE '%%@%%'
"""
# The period is judged by the reports' end; the join reads each report's records by primary key.
SOURCES = """
SELECT coalesce(c.header_from, r.domain) AS domain, host(c.source_ip) AS source,
       sum(c.messages) AS messages,
       coalesce(sum(c.messages) FILTER (WHERE c.dkim_aligned OR c.spf_aligned), 0) AS passed,
       coalesce(sum(c.messages) FILTER (WHERE c.dkim_aligned), 0) AS dkim_aligned,
       coalesce(sum(c.messages) FILTER (WHERE c.spf_aligned), 0) AS spf_aligned,
       coalesce(sum(c.messages) FILTER (WHERE c.disposition IN ('quarantine', 'reject')), 0) AS quarantined_or_rejected,
       count(DISTINCT r.id) AS reports,
       string_agg(DISTINCT r.org_name, ', ' ORDER BY r.org_name) AS reporters,
       count(DISTINCT r.id) FILTER (WHERE r.disputes > 0) AS disputed,
       max(r.ends_at) AS last_seen
FROM mailroom.dmarc_reports r
JOIN mailroom.dmarc_records c ON c.report = r.id
WHERE r.ends_at >= %(since)s
  AND (%(domain)s::text IS NULL OR r.domain = %(domain)s OR c.header_from = %(domain)s)
GROUP BY 1, 2
ORDER BY sum(c.messages) - coalesce(sum(c.messages) FILTER (WHERE c.dkim_aligned OR c.spf_aligned), 0) DESC,
         sum(c.messages) DESC, 1, 2
LIMIT %(limit)s
"""


@dataclass(frozen=True)
class SourceSummary:
    """Mail in one domain's name from one source address over the period, as the reports count it."""

    domain: str
    source: str
    messages: int
    passed: int
    dkim_aligned: int
    spf_aligned: int
    quarantined_or_rejected: int
    reports: int
    reporters: str
    last_seen: datetime
    flagged: bool
    # Of the reports counted, those another report with their organisation and id contradicted.
    disputed: int = 0

    @property
    def failed(self) -> int:
        """Messages that failed DMARC (neither DKIM nor SPF aligned)."""
        return self.messages - self.passed

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the period's end as ISO 8601)."""
        item = asdict(self)
        item["failed"] = self.failed
        item["last_seen"] = self.last_seen.isoformat()
        return item


def summarise(
    conn: psycopg.Connection[Any], since: datetime, domain: str | None = None, limit: int = 500
) -> list[SourceSummary]:
    """Each (From domain, source) pair of reports ending since `since`, most failed messages first."""
    with conn.cursor(row_factory=dict_row) as cur:
        ours = frozenset(str(r["domain"]) for r in cur.execute(SENDER_DOMAINS).fetchall())
    params = {"since": since, "domain": domain.lower().rstrip(".") if domain else None, "limit": limit}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(SOURCES, params).fetchall()
    return [_summary(row, ours) for row in rows]


def _summary(row: dict[str, Any], ours: frozenset[str]) -> SourceSummary:
    messages, passed = int(row["messages"]), int(row["passed"])
    return SourceSummary(
        domain=str(row["domain"]),
        source=str(row["source"]),
        messages=messages,
        passed=passed,
        dkim_aligned=int(row["dkim_aligned"]),
        spf_aligned=int(row["spf_aligned"]),
        quarantined_or_rejected=int(row["quarantined_or_rejected"]),
        reports=int(row["reports"]),
        reporters=str(row["reporters"]),
        last_seen=row["last_seen"],
        flagged=row["domain"] in ours and messages > passed,
        disputed=int(row["disputed"]),
    )


# What health reads: the records held (kept by triggers in one row) and today's refusals by reason.
USAGE = """
SELECT s.records,
       coalesce(sum(f.reports) FILTER (WHERE f.reason = 'organisation_rate'), 0) AS organisation_rate,
       coalesce(sum(f.reports) FILTER (WHERE f.reason = 'full'), 0) AS full,
       coalesce(sum(f.reports) FILTER (WHERE f.reason = 'disputed'), 0) AS disputed
FROM mailroom.dmarc_size s
LEFT JOIN mailroom.dmarc_refusals f ON f.day = (now() AT TIME ZONE 'UTC')::date
GROUP BY s.records
"""
# The share of MAILROOM_DMARC_MAX_RECORDS past which health warns (when full, reports are refused).
FULL_WARN_SHARE = 0.8


@dataclass(frozen=True)
class DmarcFinding:
    """One thing health warns of about the DMARC reports: its kind, what it says, what to do."""

    kind: str
    text: str
    advice: str


def dmarc_findings(conn: psycopg.Connection[Any], max_records: int) -> list[DmarcFinding]:
    """Warnings: the reports near their bound in all, reports refused today by a bound, or disputed today."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(USAGE).fetchone()
    if row is None:
        return []
    found: list[DmarcFinding] = []
    held, rate, full, disputed = (int(row[k]) for k in ("records", "organisation_rate", "full", "disputed"))
    if held >= max_records * FULL_WARN_SHARE:
        found.append(
            DmarcFinding(
                "dmarc_full",
                f"the DMARC reports hold {held} records, {held / max_records:.0%} of their bound"
                " (MAILROOM_DMARC_MAX_RECORDS): when full, new reports are refused",
                "see who sends them (mailroom dmarc report), lower MAILROOM_DMARC_RETENTION_DAYS or raise the bound",
            )
        )
    if rate or full:
        found.append(
            DmarcFinding(
                "dmarc_refused",
                f"{rate + full} DMARC reports were refused today (UTC): {rate} past their organisation's daily"
                f" bound (MAILROOM_DMARC_ORG_DAILY_MAX), {full} with the reports full. Reports are"
                " unauthenticated: a flood in one reporter's name is likely forged",
                "the mailed ones are in the bounce quarantine with the reason (mailroom bounces quarantine)",
            )
        )
    if disputed:
        found.append(
            DmarcFinding(
                "dmarc_disputed",
                f"{disputed} DMARC reports today came with the organisation and id of a stored report but other"
                " content: one of each pair is not what it claims",
                "mailroom dmarc report marks their sources DISPUTED; the later ones are in the bounce quarantine",
            )
        )
    return found
