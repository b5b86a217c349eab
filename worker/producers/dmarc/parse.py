"""One DMARC aggregate report read with parsedmarc, offline, into typed rows checked before they are stored.

parsedmarc is given only XML that `xmlcheck` passed, with `offline=True` (no reverse DNS, no
download: an address is looked up in its bundled database only) and no cutting of long periods into
days. Its result is checked again here: every text field short and free of control characters, an
address that is an address, counts that fit, and as many records out as went in (parsedmarc skips a
record it cannot read; a report missing records is refused rather than stored short).
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from worker.producers.dmarc.extract import report_xml
from worker.producers.dmarc.limits import DEFAULT_LIMITS, Limits, ReportRefused
from worker.producers.dmarc.xmlcheck import check_xml

POLICIES = frozenset({"none", "quarantine", "reject"})
MAX_COUNT = 2**53  # messages a record may count (what JSON and a bigint hold alike)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class AuthResult:
    """One DKIM or SPF result as the provider evaluated it: the domain, the result word, the selector or scope."""

    domain: str
    result: str
    detail: str | None


@dataclass(frozen=True, slots=True)
class Record:
    """Messages from one source address with the same results."""

    source_ip: str
    messages: int
    disposition: str
    dkim_aligned: bool
    spf_aligned: bool
    header_from: str | None
    envelope_from: str | None
    dkim: tuple[AuthResult, ...]
    spf: tuple[AuthResult, ...]

    @property
    def aligned(self) -> bool:
        """DMARC passed: DKIM or SPF passed aligned with the From domain."""
        return self.dkim_aligned or self.spf_aligned


@dataclass(frozen=True)
class AggregateReport:
    """A report as it is stored: who sent it, its period, the policy it found, its records."""

    org_name: str
    report_id: str
    org_email: str | None
    domain: str
    begins_at: datetime
    ends_at: datetime
    policy: str
    subdomain_policy: str | None
    percent: int | None
    adkim: str | None
    aspf: str | None
    records: tuple[Record, ...]

    @property
    def messages(self) -> int:
        """Messages the report covers."""
        return sum(r.messages for r in self.records)


def parse_report(data: bytes, limits: Limits = DEFAULT_LIMITS) -> AggregateReport:
    """Read the report in `data` (XML, gzip, zip or an email carrying one), or `ReportRefused` saying why not."""
    shape = check_xml(report_xml(data, limits), limits)
    begins_at, ends_at = _period(shape.begin, shape.end, limits)
    parsed = _parsedmarc(shape.text)
    records = parsed.get("records") or []
    if len(records) != shape.records:
        raise ReportRefused(f"{shape.records - len(records)} of {shape.records} records could not be read")
    meta, published = parsed["report_metadata"], parsed["policy_published"]
    return AggregateReport(
        org_name=_text(meta.get("org_name"), "org_name", 255, required=True) or "",
        report_id=_text(meta.get("report_id"), "report_id", 255, required=True) or "",
        org_email=_text(meta.get("org_email"), "email", 320),
        domain=_domain(published.get("domain"), "policy_published/domain", required=True) or "",
        begins_at=begins_at,
        ends_at=ends_at,
        policy=_policy(published.get("p"), "p", required=True) or "",
        subdomain_policy=_policy(published.get("sp"), "sp"),
        percent=_percent(published.get("pct")),
        adkim=_mode(published.get("adkim"), "adkim"),
        aspf=_mode(published.get("aspf"), "aspf"),
        records=tuple(_record(r, limits) for r in records),
    )


def _parsedmarc(text: str) -> dict[str, Any]:
    """parsedmarc's reading of checked XML: offline, periods never cut into days."""
    # parsedmarc ships no type information (the lead may add it to mypy's ignore_missing_imports).
    from parsedmarc import InvalidAggregateReport, parse_aggregate_report_xml  # type: ignore[import-untyped]

    # parsedmarc logs each record it skips with the attacker's text; its warnings are enough.
    logging.getLogger("parsedmarc").setLevel(logging.ERROR)
    try:
        report = parse_aggregate_report_xml(
            text, offline=True, always_use_local_files=True, normalize_timespan_threshold_hours=float("inf")
        )
    except InvalidAggregateReport as exc:
        raise ReportRefused(f"not a readable DMARC aggregate report: {_clean(str(exc))[:200]}") from None
    return dict(report)


def _period(begin: str | None, end: str | None, limits: Limits) -> tuple[datetime, datetime]:
    """The report's period from its date_range (seconds since the epoch), no longer than the limit."""
    try:
        if begin is None or end is None:
            raise ValueError
        start, stop = (datetime.fromtimestamp(int(v.split(".")[0]), UTC) for v in (begin, end))
    except (ValueError, OverflowError, OSError):
        raise ReportRefused("the report's date_range is missing or not in seconds since 1970") from None
    if stop < start or stop > LATEST:
        raise ReportRefused("the report's date_range ends before it begins or after 2200")
    if (stop - start).days > limits.span_days:
        raise ReportRefused(f"the report covers {(stop - start).days} days (at most {limits.span_days})")
    return start, stop


def _clean(value: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in value)


def _text(value: Any, field: str, cap: int, *, required: bool = False) -> str | None:
    """A short printable string, or the refusal naming the field."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise ReportRefused(f"the report has no {field}")
        return None
    if not isinstance(value, str):
        raise ReportRefused(f"{field} is not text")
    text: str = value.strip()
    if len(text) > cap:
        raise ReportRefused(f"{field} is longer than {cap} characters")
    if not text.isprintable():
        raise ReportRefused(f"{field} holds control characters")
    return text


def _domain(value: Any, field: str, *, required: bool = False) -> str | None:
    text = _text(value, field, 253, required=required)
    if text is None:
        return None
    if any(c.isspace() for c in text):
        raise ReportRefused(f"{field} is not a domain")
    return text.lower().rstrip(".")


def _policy(value: Any, field: str, *, required: bool = False) -> str | None:
    text = _text(value, field, 16, required=required)
    if text is None:
        return None
    if text.lower() not in POLICIES:
        raise ReportRefused(f"{field}={text!r} is not none, quarantine or reject")
    return text.lower()


def _mode(value: Any, field: str) -> str | None:
    text = _text(value, field, 8)
    if text is None:
        return None
    if text.lower() not in ("r", "s"):
        raise ReportRefused(f"{field}={text!r} is not r or s")
    return text.lower()


def _percent(value: Any) -> int | None:
    text = _text(value, "pct", 8)
    if text is None:
        return None
    if not text.isdigit() or not 0 <= int(text) <= 100:
        raise ReportRefused(f"pct={text!r} is not 0 to 100")
    return int(text)


def _record(record: dict[str, Any], limits: Limits) -> Record:
    source = record.get("source") or {}
    address = _text(source.get("ip_address"), "source_ip", 64, required=True) or ""
    try:
        ip = str(ipaddress.ip_address(address))
    except ValueError:
        raise ReportRefused(f"source_ip {address[:64]!r} is not an IP address") from None
    count = record.get("count")
    if not isinstance(count, int) or not 0 <= count <= MAX_COUNT:
        raise ReportRefused("a record's count is not a whole number of messages")
    evaluated = record.get("policy_evaluated") or {}
    alignment = record.get("alignment") or {}
    identifiers = record.get("identifiers") or {}
    results = record.get("auth_results") or {}
    return Record(
        source_ip=ip,
        messages=count,
        disposition=(_text(evaluated.get("disposition"), "disposition", 32) or "none").lower(),
        dkim_aligned=alignment.get("dkim") is True,
        spf_aligned=alignment.get("spf") is True,
        header_from=_domain(identifiers.get("header_from"), "header_from"),
        envelope_from=_domain(identifiers.get("envelope_from"), "envelope_from"),
        dkim=_results(results.get("dkim"), "selector", limits),
        spf=_results(results.get("spf"), "scope", limits),
    )


def _results(values: Any, detail: str, limits: Limits) -> tuple[AuthResult, ...]:
    out: list[AuthResult] = []
    for value in (values or [])[: limits.auth_results]:
        if not isinstance(value, dict):
            continue
        domain = _domain(value.get("domain"), "auth_results domain")
        if domain is None:
            continue
        out.append(
            AuthResult(
                domain,
                (_text(value.get("result"), "auth_results result", 32) or "none").lower(),
                _text(value.get(detail), f"auth_results {detail}", 64),
            )
        )
    return tuple(out)
