"""Read a bounce or complaint: RFC 3464 DSNs, RFC 5965 ARF reports, and common plain-text bounces.

Only the standard library's `email` package, with the lenient compat32 policy. `parse_report` never
raises: whatever the bytes, it returns a `Report` or an `Unparseable` verdict with the reason.

Plain-text bounces (no multipart/report) are a documented best effort: a message from MAILER-DAEMON or
postmaster, or whose subject says it is a delivery failure, whose text names failed addresses (alone
on a line, as Exim, qmail, Postfix and Sendmail write them) followed within a few lines by an
enhanced status code (`5.1.1`) or an SMTP reply code (`550`). Text without a status is only taken
when it says "permanent"; the returned copy of the original (after the MTA's "copy of the message"
marker) is searched for its Message-ID and never for addresses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from email.parser import HeaderParser
from email.policy import compat32
from email.utils import getaddresses, parseaddr
from typing import Literal

Kind = Literal["hard", "soft", "complaint"]
Source = Literal["dsn", "arf", "plain"]

MAX_DIAGNOSTIC = 1000
# Feedback types that are a person's complaint; auth-failure (RFC 6591) reports a DMARC/SPF failure
# and not-spam (RFC 6430) withdraws one: neither suppresses anybody.
COMPLAINT_TYPES = frozenset({"abuse", "fraud", "virus", "other"})

_STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_SMTP_CODE = re.compile(r"(?<![\d.])([245]\d\d)(?![\d.])")
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_LONE_ADDRESS = re.compile(
    r"^\s*<?([A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)>?:?\s*$"
)
_MESSAGE_ID_LINE = re.compile(r"^message-id:\s*(<[^<>\s]{1,250}>)", re.I | re.M)
_BOUNCE_SENDER = re.compile(r"mailer-daemon|postmaster|mail delivery (sub)?system", re.I)
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|delivery status notification|mail delivery failed|failure notice|returned mail"
    r"|delivery failure|could not be delivered|non-delivery",
    re.I,
)
# Where the returned copy of the original begins (Exim, qmail, Postfix, Sendmail, Exchange).
_COPY_MARKER = re.compile(
    r"^(-{2,}.*(copy of|original message|below this line|message headers).*|\s*-+\s*Original message\s*-+\s*)$",
    re.I | re.M,
)


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


def parse_report(raw: bytes, envelope_recipients: Sequence[str] = ()) -> Report | Unparseable:
    """Parse one message; never raises, whatever the bytes."""
    try:
        return _parse(raw, envelope_recipients)
    except Exception as exc:  # the verdict for malformed input of any kind, by design
        return Unparseable(f"cannot parse: {type(exc).__name__}")


def _parse(raw: bytes, envelope_recipients: Sequence[str]) -> Report | Unparseable:
    msg = message_from_bytes(raw, policy=compat32)
    addressed = _unique(
        [a.strip().strip("<>").lower() for a in envelope_recipients]
        + _addresses(msg, "X-Original-To", "Delivered-To", "To", "Envelope-To")
    )
    own_id = _first_message_id(_header(msg, "Message-ID"))
    report = _find_report(msg)
    if report is not None:
        report_type = str(report.get_param("report-type") or "").lower()
        if report_type == "delivery-status":
            return _dsn(report, addressed, own_id)
        if report_type == "feedback-report":
            return _arf(report, addressed, own_id)
        return Unparseable(f"multipart/report of type {report_type or 'none'}")
    return _plain(msg, addressed, own_id)


def _find_report(msg: Message) -> Message | None:
    """The multipart/report part: the message itself or one inside it (some MTAs wrap it in mixed)."""
    for part in msg.walk():
        if part.get_content_type() == "multipart/report":
            return part
    return None


def _header(msg: Message, name: str) -> str | None:
    value = msg.get(name)
    if value is None:
        return None
    return " ".join(str(value).split())


def _addresses(msg: Message, *names: str) -> list[str]:
    values = [str(v) for name in names for v in (msg.get_all(name) or [])]
    return [addr.lower() for _name, addr in getaddresses(values) if "@" in addr]


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


def _field_blocks(part: Message) -> list[Message]:
    """The field blocks of a delivery-status or feedback-report part, parsed or as text."""
    payload = part.get_payload()
    if isinstance(payload, list):
        return [block for block in payload if isinstance(block, Message)]
    text = part.get_payload(decode=True)
    body = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(payload)
    blocks = re.split(r"\r?\n\s*\r?\n", body.strip())
    return [HeaderParser(policy=compat32).parsestr(block.strip() + "\n") for block in blocks if block.strip()]


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


def _returned(report: Message) -> tuple[tuple[str, ...], tuple[str, ...], Message | None]:
    """(Message-IDs, return paths) of the returned original, and its headers."""
    original = _original_headers(report)
    if original is None:
        return (), (), None
    ids = _unique([_first_message_id(_header(original, "Message-ID")) or ""])
    return ids, _unique(_addresses(original, "Return-Path")), original


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


def _dsn(report: Message, addressed: tuple[str, ...], own_id: str | None) -> Report | Unparseable:
    status_part = next((p for p in report.walk() if p.get_content_type() == "message/delivery-status"), None)
    if status_part is None:
        return Unparseable("delivery-status report without a message/delivery-status part")
    recipients: list[RecipientReport] = []
    for block in _field_blocks(status_part):
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
    ids, return_paths, _original = _returned(report)
    return Report("dsn", tuple(recipients), _unique([*addressed, *return_paths]), ids, own_id)


def _arf(report: Message, addressed: tuple[str, ...], own_id: str | None) -> Report | Unparseable:
    feedback = next((p for p in report.walk() if p.get_content_type() == "message/feedback-report"), None)
    if feedback is None:
        return Unparseable("feedback report without a message/feedback-report part")
    fields = _field_blocks(feedback)
    if not fields:
        return Unparseable("empty feedback report")
    first = fields[0]
    feedback_type = (_header(first, "Feedback-Type") or "").lower()
    if not feedback_type:
        return Unparseable("feedback report without Feedback-Type")
    ids, return_paths, original = _returned(report)
    rcpts = [_typed_address(str(v)) for v in first.get_all("Original-Rcpt-To") or []]
    named = [r for r in rcpts if r]
    if not named and original is not None:
        named = _addresses(original, "To")[:1]
    kind: Kind | None = "complaint" if feedback_type in COMPLAINT_TYPES else None
    # A provider that redacts the recipient still names the email: the return path's token says who.
    recipients = [RecipientReport(r, kind, feedback_type, None) for r in named] or [
        RecipientReport(None, kind, feedback_type, None)
    ]
    extra = {k: v for k in ("User-Agent", "Source-IP", "Reported-Domain") if (v := _header(first, k) or "")}
    return Report(
        "arf", tuple(recipients), _unique([*addressed, *return_paths]), ids, own_id, feedback_type, extra
    )


def _text_of(msg: Message) -> str:
    """The text parts of a plain bounce, decoded leniently, at most 1 MiB."""
    chunks: list[str] = []
    for part in msg.walk():
        if part.get_content_maintype() == "text" or part.get_content_type() == "message/rfc822":
            data = part.get_payload(decode=True)
            if isinstance(data, bytes):
                chunks.append(data.decode(part.get_content_charset("utf-8") or "utf-8", "replace"))
            elif part.get_content_type() == "message/rfc822":
                chunks.append("\n--- copy of the message\n" + "".join(str(m) for m in part.get_payload()))
    return "\n".join(chunks)[: 1 << 20]


def _plain(msg: Message, addressed: tuple[str, ...], own_id: str | None) -> Report | Unparseable:
    sender = _header(msg, "From") or ""
    subject = _header(msg, "Subject") or ""
    if not (_BOUNCE_SENDER.search(sender) or _BOUNCE_SUBJECT.search(subject)):
        return Unparseable("not a delivery report (no multipart/report, not from a mailer daemon)")
    text = _text_of(msg).replace("\r\n", "\n")
    marker = _COPY_MARKER.search(text)
    notice, copy = (text[: marker.start()], text[marker.start() :]) if marker else (text, "")
    permanent = bool(re.search(r"permanent|given up|failed permanently", notice, re.I))
    recipients = _plain_recipients(notice.split("\n"), permanent)
    if not recipients:
        return Unparseable("plain-text bounce naming no failed address with a status")
    ids = _unique(m.group(1) for m in _MESSAGE_ID_LINE.finditer(copy or text))
    return Report("plain", tuple(recipients), addressed, ids, own_id)


def _plain_recipients(lines: list[str], permanent: bool) -> list[RecipientReport]:
    """Each address alone on a line, with the first status or reply code in the lines after it."""
    found: dict[str, RecipientReport] = {}
    for index, line in enumerate(lines):
        match = _LONE_ADDRESS.match(line)
        if match is None or match.group(1).lower() in found:
            continue
        window = " ".join(lines[index : index + 6])[:2000]
        status = _status(window)
        code = _smtp_code(" ".join(lines[index + 1 : index + 6]))
        if status is None and code is not None:
            status = f"{str(code)[0]}.0.0"
        if status is None and permanent:
            status = "5.0.0"
        if status is None or status[0] == "2":
            continue
        diagnostic = " ".join(" ".join(lines[index + 1 : index + 4]).split())[:MAX_DIAGNOSTIC] or None
        address = match.group(1).lower()
        found[address] = RecipientReport(address, _kind(None, status), status, None, diagnostic, code)
    return list(found.values())
