"""Read a bounce or complaint: RFC 3464 DSNs, RFC 5965 ARF reports, and common plain-text bounces.

Only the standard library's `email` package, with the lenient compat32 policy. `parse_report` never
raises: whatever the bytes, it returns a `Report` or an `Unparseable` verdict with the reason.

Plain-text bounces (no multipart/report) are a documented best effort: a message from MAILER-DAEMON or
postmaster, or whose subject says it is a delivery failure, whose text names failed addresses (alone
on a line, as Exim, qmail, Postfix and Sendmail write them) followed within a few lines by an
enhanced status code (`5.1.1`) or an SMTP reply code (`550`). Text without a status is only taken
when it says "permanent"; the returned copy of the original (after the MTA's "copy of the message"
marker) is searched for its Message-ID and never for addresses.

Reading costs linear time and bounded memory whatever the bytes (`Budget`): only the first
`parse_bytes` are parsed, a message with more multipart boundaries, parts, nesting, recipient
reports or Message-IDs than the budget allows is `Unparseable` with a reason starting "over budget"
(quarantined, never retried), no regular expression has nested or overlapping quantifiers, and every
string of a `Report` is storable (no NUL, no lone surrogate, bounded length).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from email import message_from_bytes
from email.message import Message
from email.parser import HeaderParser
from email.policy import compat32
from email.utils import getaddresses, parseaddr
from itertools import islice
from typing import Literal

from worker.producers.bounces.budget import (
    DEFAULT_BUDGET,
    OVER_BUDGET,
    Budget,
    OverBudget,
    check_parts,
    check_structure,
)
from worker.producers.bounces.storable import storable, storable_or_none

Kind = Literal["hard", "soft", "complaint"]
Source = Literal["dsn", "arf", "plain"]

MAX_DIAGNOSTIC = 1000
# Feedback types that are a person's complaint; auth-failure (RFC 6591) reports a DMARC/SPF failure
# and not-spam (RFC 6430) withdraws one: neither suppresses anybody.
COMPLAINT_TYPES = frozenset({"abuse", "fraud", "virus", "other"})

MAX_FIELD = 2000  # characters of any header value read (an address or a status needs far fewer)

_STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_SMTP_CODE = re.compile(r"(?<![\d.])([245]\d\d)(?![\d.])")
# One address alone on a line: the line is stripped of `<`, `>` and `:` first, the domain's labels
# are checked by `_lone_address` (no repeated group here: one pass over at most 320 characters).
_LOCAL_AT_DOMAIN = re.compile(r"([A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64})@([A-Za-z0-9.-]{3,253})")
_LABEL = re.compile(r"[A-Za-z0-9-]{1,63}")
_MESSAGE_ID_LINE = re.compile(r"^message-id:[ \t]{0,20}(<[^<>\s]{1,250}>)", re.I | re.M)
_BOUNCE_SENDER = re.compile(r"mailer-daemon|postmaster|mail delivery (sub)?system", re.I)
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|delivery status notification|mail delivery failed|failure notice|returned mail"
    r"|delivery failure|could not be delivered|non-delivery",
    re.I,
)
_PERMANENT = re.compile(r"permanent|given up|failed permanently", re.I)
# Where the returned copy of the original begins (Exim, qmail, Postfix, Sendmail, Exchange): a line
# of dashes naming one of these, or `--- Original message ---`. Read line by line with `in`: the
# regular expression this replaces (`^-{2,}.*(copy of|...).*$`) took quadratic time on a line of
# dashes (60 s for 40,000 of them, hours for a megabyte).
_COPY_PHRASES = ("copy of", "original message", "below this line", "message headers")


@dataclass(frozen=True)
class RecipientReport:
    """What a report says about one recipient: kind None is a success report (delivered, relayed)."""

    recipient: str | None
    kind: Kind | None
    status: str | None
    action: str | None
    diagnostic: str | None = None
    smtp_code: int | None = None


@dataclass(frozen=True)
class Report:
    """A readable DSN, ARF or plain bounce, and where to look for the email it is about."""

    source: Source
    recipients: tuple[RecipientReport, ...]
    # the addresses the report was sent to: where a return-path token may be
    addressed_to: tuple[str, ...] = ()
    # Message-IDs of the original (returned headers), which name the email too
    original_message_ids: tuple[str, ...] = ()
    message_id: str | None = None
    feedback_type: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Unparseable:
    """Not a report Mailroom can read, and why."""

    reason: str


def parse_report(
    raw: bytes, envelope_recipients: Sequence[str] = (), budget: Budget = DEFAULT_BUDGET
) -> Report | Unparseable:
    """Parse one message within `budget`; never raises, whatever the bytes."""
    try:
        parsed = _parse(raw[: budget.parse_bytes], envelope_recipients, budget)
    except OverBudget as exc:
        return Unparseable(f"{OVER_BUDGET}: {exc}")
    except Exception as exc:  # the verdict for malformed input of any kind, by design
        return Unparseable(f"cannot parse: {type(exc).__name__}")
    return _storable(parsed) if isinstance(parsed, Report) else parsed


def _parse(raw: bytes, envelope_recipients: Sequence[str], budget: Budget) -> Report | Unparseable:
    check_structure(raw, budget)
    msg = message_from_bytes(raw, policy=compat32)
    check_parts(msg, budget)
    addressed = _unique(
        [a.strip().strip("<>").lower() for a in envelope_recipients]
        + _addresses(msg, "X-Original-To", "Delivered-To", "To", "Envelope-To")
    )[: budget.addresses]
    own_id = _first_message_id(_header(msg, "Message-ID"))
    report = _find_report(msg)
    if report is not None:
        report_type = str(report.get_param("report-type") or "").lower()[:100]
        if report_type == "delivery-status":
            return _dsn(report, addressed, own_id, budget)
        if report_type == "feedback-report":
            return _arf(report, addressed, own_id, budget)
        return Unparseable(f"multipart/report of type {report_type or 'none'}")
    return _plain(msg, addressed, own_id, budget)


def _storable(report: Report) -> Report:
    """The report with every string cleaned for the database (NUL, lone surrogates, length)."""
    recipients = tuple(
        replace(
            r,
            recipient=storable_or_none(r.recipient, 320),
            status=storable_or_none(r.status, 100),
            action=storable_or_none(r.action, 100),
            diagnostic=storable_or_none(r.diagnostic, MAX_DIAGNOSTIC),
        )
        for r in report.recipients
    )
    return replace(
        report,
        recipients=recipients,
        addressed_to=tuple(storable(a, 320) for a in report.addressed_to),
        original_message_ids=tuple(storable(m, 252) for m in report.original_message_ids),
        message_id=storable_or_none(report.message_id, 252),
        feedback_type=storable_or_none(report.feedback_type, 100),
        extra={storable(k, 100): storable(v, 500) for k, v in report.extra.items()},
    )


def _find_report(msg: Message) -> Message | None:
    """The multipart/report part: the message itself or one inside it (some MTAs wrap it in mixed)."""
    for part in msg.walk():
        if part.get_content_type() == "multipart/report":
            return part
    return None


def _header(msg: Message, name: str, limit: int = MAX_FIELD) -> str | None:
    value = msg.get(name)
    if value is None:
        return None
    return " ".join(str(value)[: limit * 4].split())[:limit]


def _addresses(msg: Message, *names: str, limit: int = 100) -> list[str]:
    """The addresses in these headers: at most `limit` headers of each name, each cut at 8 KiB."""
    values = [str(v)[:8192] for name in names for v in (msg.get_all(name) or [])[:limit]]
    return [addr.lower() for _name, addr in getaddresses(values) if "@" in addr][:limit]


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item for item in items if item))


def _first_message_id(value: str | None) -> str | None:
    if not value:
        return None
    match = re.search(r"<[^<>\s]{1,250}>", value)
    if match:
        return match.group(0)
    # Some reports (RFC 5965's own examples) leave the angle brackets out.
    bare = value.strip()
    return f"<{bare}>" if re.fullmatch(r"[^<>\s@]{1,200}@[^<>\s@]{1,200}", bare) else None


def _field_blocks(part: Message, budget: Budget) -> list[Message]:
    """The field blocks of a delivery-status or feedback-report part, parsed or as text."""
    most = budget.recipients + 1  # and the per-message block
    payload = part.get_payload()
    if isinstance(payload, list):
        blocks = [block for block in payload if isinstance(block, Message)]
    else:
        text = part.get_payload(decode=True)
        body = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(payload)
        parser = HeaderParser(policy=compat32)
        blocks = [
            parser.parsestr(block.strip() + "\n") for block in islice(_blank_line_blocks(body), most + 1)
        ]
    if len(blocks) > most:
        raise OverBudget(f"more than {budget.recipients} recipient reports")
    return blocks


def _blank_line_blocks(body: str) -> Iterator[str]:
    """The runs of lines between blank lines (a line of white space is blank)."""
    block: list[str] = []
    for line in body.split("\n"):
        if line.strip():
            block.append(line.rstrip("\r"))
        elif block:
            yield "\n".join(block)
            block = []
    if block:
        yield "\n".join(block)


def _original_headers(report: Message) -> Message | None:
    """The returned original's headers: text/rfc822-headers, message/rfc822 or message/rfc822-headers."""
    for part in report.walk():
        ctype = part.get_content_type()
        if ctype == "message/rfc822":
            inner = part.get_payload()
            if isinstance(inner, list) and inner and isinstance(inner[0], Message):
                return inner[0]
        if ctype in ("text/rfc822-headers", "message/rfc822-headers"):
            data = part.get_payload(decode=True)
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(part.get_payload())
            return HeaderParser(policy=compat32).parsestr(text.lstrip())
    return None


def _returned(report: Message) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(Message-IDs, return paths) of the returned original."""
    original = _original_headers(report)
    if original is None:
        return (), ()
    ids = _unique([_first_message_id(_header(original, "Message-ID")) or ""])
    return ids, _unique(_addresses(original, "Return-Path"))


def _typed_address(value: str | None) -> str | None:
    """The address of `rfc822; ada@example.com` (or of a bare address), lower case."""
    if not value:
        return None
    text = value.partition(";")[2] if ";" in value else value
    addr = parseaddr(text.strip())[1] or text.strip().strip("<>")
    return addr.lower() if "@" in addr else None


def _kind(action: str | None, status: str | None) -> Kind | None:
    """Hard for a permanent failure (failed, 5.x.x), soft for a transient one (delayed, 4.x.x, x.2.2)."""
    klass = status[0] if status else None
    if status is not None and status[1:] == ".2.2":
        return "soft"  # mailbox full: a passing state, whatever class the receiver gave it
    if action == "failed":
        return "soft" if klass == "4" else "hard"
    if action == "delayed":
        return "soft"
    if action in ("delivered", "relayed", "expanded"):
        return None
    if klass == "5":
        return "hard"
    return "soft" if klass == "4" else None


def _status(text: str | None) -> str | None:
    match = _STATUS.search(text or "")
    return match.group(0) if match else None


def _smtp_code(text: str | None) -> int | None:
    match = _SMTP_CODE.search(text or "")
    return int(match.group(1)) if match else None


def _dsn(
    report: Message, addressed: tuple[str, ...], own_id: str | None, budget: Budget
) -> Report | Unparseable:
    status_part = next((p for p in report.walk() if p.get_content_type() == "message/delivery-status"), None)
    if status_part is None:
        return Unparseable("delivery-status report without a message/delivery-status part")
    recipients: list[RecipientReport] = []
    for block in _field_blocks(status_part, budget):
        final = _typed_address(_header(block, "Final-Recipient"))
        if final is None:
            continue  # the per-message block (Reporting-MTA, Arrival-Date)
        original = _typed_address(_header(block, "Original-Recipient"))
        action = (_header(block, "Action") or "").lower() or None
        diagnostic = _header(block, "Diagnostic-Code")
        status = _status(_header(block, "Status")) or _status(diagnostic)
        recipients.append(
            RecipientReport(
                recipient=original or final,
                kind=_kind(action, status),
                status=status,
                action=action,
                diagnostic=diagnostic[:MAX_DIAGNOSTIC] if diagnostic else None,
                smtp_code=_smtp_code(diagnostic),
            )
        )
    if not recipients:
        return Unparseable("delivery-status report names no recipient")
    ids, return_paths = _returned(report)
    return Report("dsn", tuple(recipients), _unique([*addressed, *return_paths]), ids, own_id)


def _arf(
    report: Message, addressed: tuple[str, ...], own_id: str | None, budget: Budget
) -> Report | Unparseable:
    feedback = next((p for p in report.walk() if p.get_content_type() == "message/feedback-report"), None)
    if feedback is None:
        return Unparseable("feedback report without a message/feedback-report part")
    fields = _field_blocks(feedback, budget)
    if not fields:
        return Unparseable("empty feedback report")
    first = fields[0]
    feedback_type = (_header(first, "Feedback-Type") or "").lower()
    if not feedback_type:
        return Unparseable("feedback report without Feedback-Type")
    ids, return_paths = _returned(report)
    values = first.get_all("Original-Rcpt-To") or []
    if len(values) > budget.recipients:
        raise OverBudget(f"more than {budget.recipients} recipient reports")
    rcpts = [_typed_address(" ".join(str(v)[: MAX_FIELD * 4].split())[:MAX_FIELD]) for v in values]
    # Without Original-Rcpt-To the token names the recipient: the original's To header is the same in
    # every recipient's copy, so it would name the first To for a complaint from a Cc or Bcc.
    named = [r for r in rcpts if r]
    kind: Kind | None = "complaint" if feedback_type in COMPLAINT_TYPES else None
    # A provider that redacts the recipient still names the email: the return path's token says who.
    recipients = [RecipientReport(r, kind, feedback_type, None) for r in named] or [
        RecipientReport(None, kind, feedback_type, None)
    ]
    extra = {k: v for k in ("User-Agent", "Source-IP", "Reported-Domain") if (v := _header(first, k) or "")}
    return Report(
        "arf", tuple(recipients), _unique([*addressed, *return_paths]), ids, own_id, feedback_type, extra
    )


def _text_of(msg: Message, budget: Budget) -> str:
    """The text parts of a plain bounce, decoded leniently, at most `budget.text_chars` in all."""
    chunks: list[str] = []
    left = budget.text_chars
    for part in msg.walk():
        if left <= 0:
            break
        if part.get_content_maintype() == "text" or part.get_content_type() == "message/rfc822":
            data = part.get_payload(decode=True)
            if isinstance(data, bytes):
                chunk = data[: left * 4].decode(_charset(part), "replace")
            elif part.get_content_type() == "message/rfc822":
                chunk = "\n--- copy of the message\n" + "".join(str(m) for m in part.get_payload())
            else:
                continue
            chunks.append(chunk[:left])
            left -= len(chunks[-1])
    return "\n".join(chunks)


def _charset(part: Message) -> str:
    """The part's charset when Python decodes it as text in linear time, else UTF-8."""
    name = str(part.get_content_charset("utf-8") or "utf-8")
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):
        return "utf-8"
    # punycode decodes in quadratic time; idna is for host names, not text
    if info.name in ("punycode", "idna") or not getattr(info, "_is_text_encoding", True):
        return "utf-8"
    return info.name


def _plain(
    msg: Message, addressed: tuple[str, ...], own_id: str | None, budget: Budget
) -> Report | Unparseable:
    sender = _header(msg, "From") or ""
    subject = _header(msg, "Subject") or ""
    if not (_BOUNCE_SENDER.search(sender) or _BOUNCE_SUBJECT.search(subject)):
        return Unparseable("not a delivery report (no multipart/report, not from a mailer daemon)")
    lines = _text_of(msg, budget).replace("\r\n", "\n").split("\n")
    marker = next((i for i, line in enumerate(lines) if _is_copy_marker(line)), len(lines))
    notice = lines[:marker]
    permanent = any(_PERMANENT.search(line) for line in notice)
    recipients = _plain_recipients(notice, permanent, budget)
    if not recipients:
        return Unparseable("plain-text bounce naming no failed address with a status")
    copy = "\n".join(lines[marker:] if marker < len(lines) else lines)
    ids = _unique(m.group(1) for m in islice(_MESSAGE_ID_LINE.finditer(copy), budget.message_ids))
    return Report("plain", tuple(recipients), addressed, ids, own_id)


def _is_copy_marker(line: str) -> bool:
    """Whether the returned copy of the original starts at this line (see `_COPY_PHRASES`)."""
    if line.startswith("--"):
        lower = line.lower()
        if any(phrase in lower for phrase in _COPY_PHRASES):
            return True
    core = line.strip()
    return (
        core.startswith("-") and core.endswith("-") and core.strip("-").strip().lower() == "original message"
    )


def _lone_address(line: str) -> str | None:
    """The address when it stands alone on the line (`<a@b.example>:` too), lower case; else None."""
    if len(line) > 400:
        return None
    core = line.strip()
    core = core[1:] if core.startswith("<") else core
    core = core[:-1] if core.endswith(":") else core
    core = core[:-1] if core.endswith(">") else core
    match = _LOCAL_AT_DOMAIN.fullmatch(core)
    if match is None:
        return None
    labels = match.group(2).split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        return None
    return core.lower()


def _plain_recipients(lines: list[str], permanent: bool, budget: Budget) -> list[RecipientReport]:
    """Each address alone on a line, with the first status or reply code in the lines after it."""
    found: dict[str, RecipientReport] = {}
    for index, line in enumerate(lines):
        address = _lone_address(line)
        if address is None or address in found:
            continue
        following = [text[:MAX_FIELD] for text in lines[index + 1 : index + 6]]
        window = " ".join([line, *following])[:2000]
        status = _status(window)
        code = _smtp_code(" ".join(following))
        if status is None and code is not None:
            status = f"{str(code)[0]}.0.0"
        if status is None and permanent:
            status = "5.0.0"
        if status is None or status[0] == "2":
            continue
        diagnostic = " ".join(" ".join(following[:3]).split())[:MAX_DIAGNOSTIC] or None
        if len(found) >= budget.recipients:
            raise OverBudget(f"more than {budget.recipients} recipient reports")
        found[address] = RecipientReport(address, _kind(None, status), status, None, diagnostic, code)
    return list(found.values())
