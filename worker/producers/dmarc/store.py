"""A parsed report kept once per organisation and report id, only for our domains, and within bounds.

A report about a domain no sender account sends from is refused, not kept flagged: anyone can mail a
report about any domain to the dmarc@ address, and keeping them would let strangers fill the table.
The policy domain counts as ours when it is a sender's From domain or a parent of one that is not a
public suffix (a policy published at example.com covers mail from news.example.com; "com" or "co.uk"
cover nothing). A record's own From domain does not make a report ours: our domains are public, so
that would let anyone who names one store a report.

Nothing in a report is authenticated, and our From domain is public: anyone can mail reports "from
google.com" about it. So what is stored is bounded in all (`Bounds.max_records`) and per reporting
organisation and UTC day (`Bounds.org_daily_max`), checked under one lock; past a bound a report is
refused and counted per day (health warns). A report is kept once per organisation and id: the same
content again is "seen before"; other content under a stored organisation and id is refused and the
stored report marked disputed (one of the two is not what it claims), never taken for the same.
`admit` applies the same rules to a report's header, so the intake can refuse it before its records
are read.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from worker.core.config import Settings
from worker.producers.dmarc.limits import ReportRefused
from worker.producers.dmarc.parse import AggregateReport, AuthResult, ReportHeader

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

ArrivedBy = Literal["cli", "receiver", "mailbox"]
Refusal = Literal["organisation_rate", "full", "disputed"]

DMARC_LOCK_KEY = 7_243_031  # pg_advisory_xact_lock: bounds and duplicates are checked one report at a time

SENDER_DOMAINS = """
SELECT DISTINCT lower(split_part(from_email, '@', 2)) FROM mailroom.sender_accounts WHERE from_email LIKE '%%@%%'
"""
# What the bounds count: the records held in all (one row kept by triggers), the organisation's reports today.
USAGE = """
SELECT (SELECT records FROM mailroom.dmarc_size) AS records,
       (SELECT count(*) FROM mailroom.dmarc_reports
        WHERE org_name = %s AND received_at >= date_trunc('day', now(), 'UTC')) AS org_today
"""
STORED = """
SELECT id, digest FROM mailroom.dmarc_reports WHERE org_name = %s AND report_id = %s FOR UPDATE
"""
KNOWN = "SELECT EXISTS (SELECT 1 FROM mailroom.dmarc_reports WHERE org_name = %s AND report_id = %s)"
SET_DIGEST = "UPDATE mailroom.dmarc_reports SET digest = %s WHERE id = %s"
DISPUTE = "UPDATE mailroom.dmarc_reports SET disputes = disputes + 1, disputed_at = now() WHERE id = %s"
COUNT_REFUSAL = """
INSERT INTO mailroom.dmarc_refusals (day, reason, reports) VALUES ((now() AT TIME ZONE 'UTC')::date, %s, 1)
ON CONFLICT (day, reason) DO UPDATE SET reports = mailroom.dmarc_refusals.reports + 1
"""
INSERT_REPORT = """
INSERT INTO mailroom.dmarc_reports (org_name, report_id, org_email, domain, begins_at, ends_at, policy,
    subdomain_policy, percent, adkim, aspf, messages, arrived_by, records, digest)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
RETURNING id
"""
COPY_RECORDS = """
COPY mailroom.dmarc_records (report, position, source_ip, messages, disposition, dkim_aligned, spf_aligned,
    header_from, envelope_from, auth_results) FROM STDIN
"""


@dataclass(frozen=True)
class Bounds:
    """What the stored reports may hold: records in all, and reports per reporting organisation per UTC day."""

    max_records: int
    org_daily_max: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Bounds:
        """The bounds `MAILROOM_DMARC_MAX_RECORDS` and `MAILROOM_DMARC_ORG_DAILY_MAX` set."""
        return cls(settings.dmarc_max_records, settings.dmarc_org_daily_max)


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


def is_ours(report: ReportHeader, domains: frozenset[str]) -> bool:
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
    """The public suffix list (publicsuffixlist bundles it), read once a process."""
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def refuse_unless_ours(report: ReportHeader, domains: frozenset[str]) -> None:
    """`ReportRefused` when the report is not about one of `domains`."""
    if not is_ours(report, domains):
        raise ReportRefused(
            f"the report is for {report.domain}, which is not the From domain of any sender account "
            "(add the sender first: `mailroom senders add`)"
        )


def admit(
    conn: psycopg.Connection[Any], header: ReportHeader, domains: frozenset[str], bounds: Bounds
) -> None:
    """Refuse, on its header alone, a report that is not ours or that a bound would refuse (counted as
    refused); `store_report` decides again under the lock once the records are read. A report whose
    organisation and id are stored already is read whole: the same again is seen before, whatever the
    bounds, and other content disputes it."""
    refuse_unless_ours(header, domains)
    known = conn.execute(KNOWN, (header.org_name, header.report_id)).fetchone()
    if known is not None and _first(known):
        return
    with conn.transaction():
        refusal = _over_bounds(conn, header, 1, bounds)
        if refusal is not None:
            conn.execute(COUNT_REFUSAL, (refusal[0],))
    if refusal is not None:
        raise ReportRefused(refusal[1])


def _over_bounds(
    conn: psycopg.Connection[Any], header: ReportHeader, records: int, bounds: Bounds
) -> tuple[Refusal, str] | None:
    """Which bound storing a report of `records` records from `header`'s organisation would pass, and why."""
    row = conn.execute(USAGE, (header.org_name,)).fetchone()
    assert row is not None
    held, org_today = int(_first(row)), int(row[1] if isinstance(row, tuple) else row["org_today"])
    if org_today >= bounds.org_daily_max:
        return "organisation_rate", (
            f"{header.org_name} already has {org_today} reports stored today (UTC), its daily bound "
            "(MAILROOM_DMARC_ORG_DAILY_MAX): reports are unauthenticated, so a flood in one reporter's name "
            "is refused"
        )
    if held + records > bounds.max_records:
        return "full", (
            f"the stored reports hold {held} records; {records} more would pass the bound of "
            f"{bounds.max_records} (MAILROOM_DMARC_MAX_RECORDS)"
        )
    return None


def store_report(
    conn: psycopg.Connection[Any],
    report: AggregateReport,
    arrived_by: ArrivedBy,
    bounds: Bounds | None = None,
) -> Stored:
    """Insert the report and its records in one transaction, or say it was seen before; `ReportRefused`
    when its domain is not ours, a bound would be passed, or it disputes a stored report."""
    bounds = bounds or Bounds.from_settings(Settings.from_env())
    digest = report_digest(report)
    with conn.transaction():
        refuse_unless_ours(report, sender_domains(conn))
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (DMARC_LOCK_KEY,))
        refusal = _same_id(conn, report, digest)
        if refusal is None:
            refusal = _over_bounds(conn, report, len(report.records), bounds)
            if refusal is None:
                return Stored(True, _insert(conn, report, arrived_by, digest), report)
        if refusal[0] == "seen before":
            return Stored(False, None, report)
        conn.execute(COUNT_REFUSAL, (refusal[0],))
    raise ReportRefused(refusal[1])


def _same_id(conn: psycopg.Connection[Any], report: AggregateReport, digest: bytes) -> tuple[str, str] | None:
    """None when no report has this organisation and id; "seen before" when one has the same content;
    "disputed" (the stored one marked so) when one has other content."""
    row = conn.execute(STORED, (report.org_name, report.report_id)).fetchone()
    if row is None:
        return None
    stored_id, stored_digest = (row[0], row[1]) if isinstance(row, tuple) else (row["id"], row["digest"])
    if stored_digest is None:  # stored before digests were kept: this arrival's content stands for it
        conn.execute(SET_DIGEST, (digest, stored_id))
    elif bytes(stored_digest) != digest:
        conn.execute(DISPUTE, (stored_id,))
        return "disputed", (
            f"a report {report.report_id} from {report.org_name} was stored before with other content: "
            "this one is not stored, and the stored one is now marked disputed (reports are unauthenticated: "
            "one of the two is not what it claims)"
        )
    return "seen before", ""


def _insert(
    conn: psycopg.Connection[Any], report: AggregateReport, arrived_by: ArrivedBy, digest: bytes
) -> int:
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
            len(report.records),
            digest,
        ),
    ).fetchone()
    assert row is not None
    report_row = int(_first(row))
    with conn.cursor().copy(COPY_RECORDS) as copy:
        for position, r in enumerate(report.records):
            auth = {"dkim": _results(r.dkim, "selector"), "spf": _results(r.spf, "scope")}
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
                    Jsonb(auth),
                )
            )
    return report_row


def _results(results: tuple[AuthResult, ...], detail: str) -> list[dict[str, str | None]]:
    return [{"domain": a.domain, "result": a.result, detail: a.detail} for a in results]


def report_digest(report: AggregateReport) -> bytes:
    """SHA-256 of what the report says, as it is stored: the same report in any wrapping has the same one."""
    h = hashlib.sha256()
    head = (report.org_name, report.report_id, report.org_email, report.domain, report.begins_at.isoformat())
    h.update(repr((*head, report.ends_at.isoformat(), report.policy, report.subdomain_policy)).encode())
    h.update(repr((report.percent, report.adkim, report.aspf)).encode())
    for r in report.records:
        dkim = tuple((a.domain, a.result, a.detail) for a in r.dkim)
        spf = tuple((a.domain, a.result, a.detail) for a in r.spf)
        fields = (r.source_ip, r.messages, r.disposition, r.dkim_aligned, r.spf_aligned, r.header_from)
        h.update(repr((*fields, r.envelope_from, dkim, spf)).encode())
    return h.digest()
