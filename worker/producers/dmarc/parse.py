"""One DMARC aggregate report read into typed rows, checked before they are stored, offline and in one pass.

`xmlread` streams the XML (out of its gzip, zip or email, piece by piece) and hands on the header
and then each record as text; they are checked here as they come: every text field short and free
of control characters, an address that is an address, counts that fit. Nothing is looked up: no
reverse DNS, no geolocation of addresses, nothing fetched (a report needs none of it, and
parsedmarc, which did, opened its address database once per record: 23 s for 50,000 records). The
caller's `decide` sees the header (who reports, for which domain) before any record is read, so a
report refused on its header costs its header alone.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from worker.producers.dmarc.extract import report_pieces
from worker.producers.dmarc.limits import DEFAULT_LIMITS, Limits, ReportRefused
from worker.producers.dmarc.xmlread import RawRecord, read_xml

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
class ReportHeader:
    """What a report says before its records: who reports, its id and period, the policy it found."""

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


@dataclass(frozen=True)
class AggregateReport(ReportHeader):
    """A report as it is stored: its header and its records."""

    records: tuple[Record, ...]

    @property
    def messages(self) -> int:
        """Messages the report covers."""
        return sum(r.messages for r in self.records)


Decide = Callable[[ReportHeader], None]


def parse_report(
    data: bytes, limits: Limits = DEFAULT_LIMITS, *, decide: Decide | None = None
) -> AggregateReport:
    """Read the report in `data` (XML, gzip, zip or an email carrying one), or `ReportRefused` saying why not.

    `decide` is called with the header once it is read, before any record: it refuses the report by
    raising `ReportRefused`, and no more of it is then inflated or read."""
    header: list[ReportHeader] = []
    records: list[Record] = []

    def take_header(texts: dict[str, str]) -> None:
        header.append(_header(texts, limits))
        if decide is not None:
            decide(header[0])

    def take_record(raw: RawRecord) -> None:
        records.append(_record(raw))

    read_xml(report_pieces(data, limits), limits, take_header, take_record)
    return AggregateReport(**vars(header[0]), records=tuple(records))


def _header(texts: dict[str, str], limits: Limits) -> ReportHeader:
    """The header's fields checked (parsedmarc's readings kept: an org_name that is a domain in lower
    case, else the contact address's domain; the report id without <> or an @domain; sp defaulting to p
    and the alignment modes to relaxed, as RFC 7489 says)."""
    email = _text(texts.get("email"), "email", 320)
    org = _text(texts.get("org_name"), "org_name", 255) or (email.rpartition("@")[2] if email else None)
    if not org:
        raise ReportRefused("the report has no org_name")
    report_id = _text(texts.get("report_id"), "report_id", 255, required=True) or ""
    report_id = report_id.replace("<", "").replace(">", "").split("@")[0]
    begins_at, ends_at = _period(texts.get("begin"), texts.get("end"), limits)
    policy = _policy(texts.get("p"), "p", required=True) or ""
    return ReportHeader(
        org_name=org if any(c.isspace() for c in org) else org.lower(),
        report_id=_text(report_id, "report_id", 255, required=True) or "",
        org_email=email,
        domain=_domain(texts.get("domain"), "policy_published/domain", required=True) or "",
        begins_at=begins_at,
        ends_at=ends_at,
        policy=policy,
        subdomain_policy=_policy(texts.get("sp"), "sp") or policy,
        percent=_percent(texts.get("pct")),
        adkim=_mode(texts.get("adkim"), "adkim") or "r",
        aspf=_mode(texts.get("aspf"), "aspf") or "r",
    )


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


def _text(value: str | None, field: str, cap: int, *, required: bool = False) -> str | None:
    """A short printable string, or the refusal naming the field."""
    text = value.strip() if value is not None else ""
    if not text:
        if required:
            raise ReportRefused(f"the report has no {field}")
        return None
    if len(text) > cap:
        raise ReportRefused(f"{field} is longer than {cap} characters")
    if not text.isprintable():
        raise ReportRefused(f"{field} holds control characters")
    return text


def _domain(value: str | None, field: str, *, required: bool = False) -> str | None:
    text = _text(value, field, 253, required=required)
    if text is None:
        return None
    if " " in text:  # the only white space a printable string may hold
        raise ReportRefused(f"{field} is not a domain")
    return text.lower().rstrip(".")


def _policy(value: str | None, field: str, *, required: bool = False) -> str | None:
    text = _text(value, field, 16, required=required)
    if text is None:
        return None
    if text.lower() not in POLICIES:
        raise ReportRefused(f"{field}={text!r} is not none, quarantine or reject")
    return text.lower()


def _mode(value: str | None, field: str) -> str | None:
    text = _text(value, field, 8)
    if text is None:
        return None
    if text.lower() not in ("r", "s"):
        raise ReportRefused(f"{field}={text!r} is not r or s")
    return text.lower()


def _percent(value: str | None) -> int | None:
    text = _text(value, "pct", 8)
    if text is None:
        return None
    if not text.isdigit() or not 0 <= int(text) <= 100:
        raise ReportRefused(f"pct={text!r} is not 0 to 100")
    return int(text)


def _record(raw: RawRecord) -> Record:
    fields = raw.fields
    ip = _address(_text(fields.get("source_ip"), "source_ip", 64, required=True) or "")
    count = _text(fields.get("count"), "count", 20)
    if count is None or not (count.isascii() and count.isdigit()) or int(count) > MAX_COUNT:
        raise ReportRefused("a record's count is not a whole number of messages")
    spf = _results(raw.auth["spf"], "scope", "mfrom")
    # A record without envelope_from: the domain SPF was checked for (what parsedmarc filled in).
    envelope_from = _domain(fields.get("envelope_from"), "envelope_from") or (spf[-1].domain if spf else None)
    return Record(
        source_ip=ip,
        messages=int(count),
        disposition=(_text(fields.get("disposition"), "disposition", 32) or "none").lower(),
        dkim_aligned=(_text(fields.get("dkim"), "policy_evaluated dkim", 32) or "").lower() == "pass",
        spf_aligned=(_text(fields.get("spf"), "policy_evaluated spf", 32) or "").lower() == "pass",
        header_from=_domain(fields.get("header_from"), "header_from"),
        envelope_from=envelope_from,
        dkim=_results(raw.auth["dkim"], "selector", None),
        spf=spf,
    )


def _address(text: str) -> str:
    """An IP address in its canonical form (an IPv4 address by the C library: a tenth of ipaddress's time)."""
    try:
        if ":" not in text:
            return socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, text))
        address = ipaddress.IPv6Address(text)
        if address.scope_id is None:
            return str(address)
    except (OSError, ValueError):
        pass
    raise ReportRefused(f"source_ip {text[:64]!r} is not an IP address")


def _results(values: list[dict[str, str]], detail: str, default: str | None) -> tuple[AuthResult, ...]:
    out: list[AuthResult] = []
    for value in values:
        domain = _domain(value.get("domain"), "auth_results domain")
        if domain is None:
            continue
        out.append(
            AuthResult(
                domain,
                (_text(value.get("result"), "auth_results result", 32) or "none").lower(),
                _text(value.get(detail), f"auth_results {detail}", 64) or default,
            )
        )
    return tuple(out)
