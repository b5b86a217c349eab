"""Build the RFC 5322 bytes of a stored email, once, with a stable Message-ID.

The common case (ASCII headers that fit on a line, text bodies) is written directly; anything
else goes through the standard library's folding and encoders. The `email` package's object
model costs about a millisecond a message, most of the worker's CPU, so it is not used here.
"""

from __future__ import annotations

import binascii
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.headerregistry import Address
from email.policy import SMTP
from email.utils import format_datetime
from typing import Any

from worker.core.attachments import File, with_files
from worker.core.campaign_mail import Dress, add_footer, unsubscribe_url
from worker.core.html_text import text_from_html
from worker.core.recipient_tokens import message_id, unsubscribe_token
from worker.core.validation import ValidationError, check_header_name, check_header_text, normalise_address

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 .'-]*$")


@dataclass(frozen=True)
class Envelope:
    """The SMTP envelope and the bytes to send."""

    sender: str
    recipient: str
    message_id: str
    content: bytes
    # An email with more recipients than its first To (more To, Cc, Bcc): every envelope recipient,
    # `recipient` first, de-duplicated and without the suppressed ones. Empty for the common email with
    # one recipient, which is the only kind whose commands may be pipelined behind another body.
    recipients: tuple[str, ...] = ()
    # With several recipients: one single-recipient envelope per recipient in `recipients`, each its
    # own message (Message-ID, unsubscribe link) and, once the engine sets it, its own return path.
    copies: tuple[Envelope, ...] = ()


def message_id_for(email_id: int, created_at: datetime, from_email: str) -> str:
    """A Message-ID derived from the email's id, for a worker without a return-path key: stable, but
    guessable, so the bounce intake never trusts it (it trusts `recipient_tokens.message_id`)."""
    domain = from_email.rpartition("@")[2] or "mailroom.invalid"
    stamp = int(created_at.timestamp() * 1_000_000)
    return f"<{email_id}.{stamp:x}@{domain}>"


_date: tuple[int, str] = (0, "")


def _date_header() -> str:
    """The Date header for now, formatted once a second (formatting cost half of building a message)."""
    global _date
    second = int(time.time())
    if _date[0] != second:
        _date = (second, f"Date: {format_datetime(datetime.fromtimestamp(second, UTC))}\r\n")
    return _date[1]


def _fold(name: str, value: str) -> str:
    """Fold and RFC 2047-encode one header the way the standard library does."""
    return str(SMTP.header_factory(name, value).fold(policy=SMTP))


def _header(name: str, value: str) -> str:
    if value.isascii() and len(name) + len(value) < 76:
        return f"{name}: {value}\r\n"
    if name == "List-Unsubscribe" and value.isascii():
        # A URI is never broken: fold only between the <...> entries (RFC 2369), one per line.
        return f"{name}: " + ",\r\n ".join(value.split(", ")) + "\r\n"
    return _fold(name, value)


def _address_header(name: str, display: str | None, email: str) -> str:
    if not display:
        return f"{name}: {email}\r\n"
    if display.isascii() and _PLAIN_NAME.match(display) and len(display) + len(email) < 60:
        return f"{name}: {display} <{email}>\r\n"
    local, _, domain = email.rpartition("@")
    return _fold(name, str(Address(display_name=display, username=local, domain=domain)))


def _part(body: str, subtype: str) -> str:
    """Content headers and body of one text part, 7bit when it can be, quoted-printable otherwise."""
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    if text.isascii() and all(len(line) <= 998 for line in text.split("\n")):
        encoding, payload = "7bit", text.replace("\n", "\r\n")
    else:
        encoding = "quoted-printable"
        payload = binascii.b2a_qp(text.encode("utf-8"), istext=True).decode("ascii").replace("\n", "\r\n")
    if not payload.endswith("\r\n"):
        payload += "\r\n"
    return f'Content-Type: text/{subtype}; charset="utf-8"\r\nContent-Transfer-Encoding: {encoding}\r\n\r\n{payload}'


def _address_list_header(name: str, addresses: list[str], display: str | None = None) -> str:
    """To, Cc or Reply-To with several addresses (the first with its display name, if any): on one line
    when it fits, else one address per line (folding after a comma is always allowed)."""
    first = addresses[0]
    if display and not (display.isascii() and _PLAIN_NAME.match(display) and len(display) + len(first) < 60):
        # A name that needs quoting, RFC 2047 encoding or folding: the standard library folds the whole list.
        local, _, domain = first.rpartition("@")
        named = str(Address(display_name=display, username=local, domain=domain))
        return _fold(name, ", ".join([named, *addresses[1:]]))
    if display:
        first = f"{display} <{first}>"
    value = ", ".join([first, *addresses[1:]])
    if len(name) + len(value) < 76:
        return f"{name}: {value}\r\n"
    return f"{name}: " + ",\r\n ".join([first, *addresses[1:]]) + "\r\n"


# The optional address lists of an email with many recipients (NULL for the common one-recipient email).
ADDRESS_LISTS = ("to_extra", "cc", "bcc", "reply_to")


def has_more_recipients(email: Mapping[str, Any]) -> bool:
    """Whether the row has recipients beyond its first To (more To, Cc or Bcc)."""
    return bool(email.get("to_extra") or email.get("cc") or email.get("bcc"))


def recipient_kinds(email: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Every envelope recipient of the row (To, then Cc, then Bcc), de-duplicated case-insensitively:
    lower-cased address -> (address as stored, kind). The first mention wins, so an address both in
    To and in Bcc is a To recipient (and appears in the headers anyway)."""
    kinds: dict[str, tuple[str, str]] = {}
    for kind, addresses in (
        ("to", [email["recipient_email"], *(email.get("to_extra") or ())]),
        ("cc", email.get("cc") or ()),
        ("bcc", email.get("bcc") or ()),
    ):
        for address in addresses:
            kinds.setdefault(address.lower(), (address, kind))
    return kinds


def envelope_recipients(email: Mapping[str, Any]) -> tuple[str, ...]:
    """The envelope recipients of a row with many recipients: To, Cc and Bcc de-duplicated, minus those
    the claim found suppressed (`dropped`: lower-cased address -> reason, see `worker.engine.queue_sql.CLAIM`)."""
    dropped = email.get("dropped") or {}
    recipients = tuple(a for key, (a, _) in recipient_kinds(email).items() if key not in dropped)
    if not recipients:
        # The claim suppresses an email whose every recipient is: reaching here is a row out of step.
        raise ValidationError("recipients", "every recipient is suppressed")
    return recipients


def _check_address_lists(email: Mapping[str, Any]) -> None:
    for field in ADDRESS_LISTS:
        addresses = email.get(field)
        if addresses is None:
            continue
        if not isinstance(addresses, list):
            raise ValidationError(field, "must be a list of email addresses")
        # Counted from 1, as the database's rules name a list element (cc[1] is the first Cc).
        for i, address in enumerate(addresses, 1):
            normalise_address(f"{field}[{i}]", address)  # also refuses control characters, encoded words


# Reserved headers Mailroom itself stores with an email (tracking and compliance, at enqueue).
STORED_BY_MAILROOM = frozenset({"List-Unsubscribe", "List-Unsubscribe-Post"})


def check_row(email: Mapping[str, Any]) -> None:
    """Check a stored row again before it is built: a row written around the API (a plain INSERT, an
    UPDATE) may hold what the API refuses. Raises `ValidationError` naming the field; encoded words
    are refused here, so folding never decodes one into a line break on the wire."""
    check_header_text("recipient_email", email["recipient_email"])
    check_header_text("subject", email["subject"])
    if email.get("recipient_name"):
        check_header_text("recipient_name", email["recipient_name"])
    for name, value in (email.get("headers") or {}).items():
        if name not in STORED_BY_MAILROOM:  # List-Unsubscribe is written into the row at enqueue
            check_header_name(name)
        if not isinstance(value, str):
            raise ValidationError(f"headers.{name}", "a header value must be text")
        check_header_text(f"headers.{name}", value)
    get = email.get
    if (
        get("to_extra") is not None
        or get("cc") is not None
        or get("bcc") is not None
        or get("reply_to") is not None
    ):
        _check_address_lists(email)


def build_message(
    email: Mapping[str, Any],
    from_email: str,
    from_name: str | None = None,
    key: bytes | None = None,
    dress: Dress | None = None,
) -> Envelope:
    """Turn a stored `email_queue` row into bytes (after `check_row`); content is used exactly as stored.

    With the return-path `key`, the Message-ID names the email and its recipient under a MAC (see
    `worker.core.recipient_tokens`). An email with several recipients becomes one copy per envelope
    recipient (`Envelope.copies`), each with its own Message-ID and its own unsubscribe link, so a
    report or a click from one recipient can only ever act for that recipient.

    With a `dress` (`worker.core.campaign_mail.dress_for`, which the engine always gives) the message
    gets its List-Id and Feedback-ID, a text part even when only HTML was stored, and the footer with
    the copy's own unsubscribe link (the one in its List-Unsubscribe) and the postal address.
    A row's `files` go with it (`worker.core.attachments.with_files`).
    """
    check_row(email)
    get = email.get
    # The common email has none of these lists: its headers are written as they always were.
    lists = get("to_extra") or get("cc") or get("bcc") or get("reply_to")
    named = get("recipient_name")
    to = _recipient_headers(email) if lists else _address_header("To", named, email["recipient_email"])
    top = "".join((_address_header("From", from_name, from_email), to, _header("Subject", email["subject"])))
    top += _date_header()
    headers: Mapping[str, str] = email.get("headers") or {}
    text, html = email.get("text_body"), email.get("html_body")
    if dress is not None and not (text and text.strip()):
        text = text_from_html(html or "")
    body = "" if dress is not None and dress.footer else _body(text, html)
    domain = from_email.rpartition("@")[2] or "mailroom.invalid"
    files = get("files") or ()  # each with its base64 lines (`worker.engine.files`)
    dressed = [(n.lower(), _header(n, v)) for n, v in dress.headers.items()] if dress is not None else []

    def copy(recipient: str, copy_headers: Mapping[str, str]) -> Envelope:
        if key is None:
            mid = message_id_for(int(email["id"]), email["created_at"], from_email)
        else:
            mid = message_id(int(email["id"]), recipient, domain, key)
        head = [top, f"Message-ID: {mid}\r\n"]
        head.extend(_header(name, value) for name, value in copy_headers.items())
        own = body
        if dress is not None:
            # An application that wrote its own List-Id or Feedback-ID keeps it: never two of one.
            given = {name.lower() for name in copy_headers} if copy_headers else ()
            head.extend(line for name, line in dressed if name not in given)
            if dress.footer:  # the footer's link is this copy's own: built per copy
                url = unsubscribe_url(copy_headers)
                own = _body(*add_footer(text, html, url, dress.postal_address))
        head.append("MIME-Version: 1.0\r\n")
        return Envelope(from_email, recipient, mid, _assembled(head, own, files))

    if not lists or not has_more_recipients(email):
        return copy(email["recipient_email"], headers)
    recipients = envelope_recipients(email)
    copies = tuple(copy(r, _recipient_unsubscribe(headers, r, key)) for r in recipients)
    first = copies[0]
    return Envelope(from_email, first.recipient, first.message_id, first.content, recipients, copies)


def _assembled(head: list[str], body: str, files: Sequence[tuple[File, bytes]]) -> bytes:
    """The message's bytes: its headers, then its body, with its files when it has any (their base64
    lines are shared by every copy and every email carrying them: joined once, here)."""
    if not files:
        return ("".join(head) + body).encode("utf-8")
    pieces = with_files(body.encode("utf-8"), files, f"=_mailroom_{secrets.token_hex(12)}")
    return b"".join([("".join(head)).encode("utf-8"), *pieces])


def _body(text: str | None, html: str | None) -> str:
    """The MIME body (with its Content-Type) of the stored text and HTML."""
    if text is not None and html is not None:
        boundary = f"=_mailroom_{secrets.token_hex(12)}"
        return (
            f'Content-Type: multipart/alternative; boundary="{boundary}"\r\n\r\n'
            f"--{boundary}\r\n{_part(text, 'plain')}--{boundary}\r\n{_part(html, 'html')}--{boundary}--\r\n"
        )
    return _part(text, "plain") if text is not None else _part(html or "", "html")


# The tracker's unsubscribe URL as `worker.core.links` writes it into List-Unsubscribe.
_UNSUBSCRIBE_URL = re.compile(r"/u/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})>")


def _recipient_unsubscribe(
    headers: Mapping[str, str], recipient: str, key: bytes | None
) -> Mapping[str, str]:
    """The headers of one recipient's copy: its own unsubscribe link. Without a key the email's plain
    link stays, which the tracker refuses for an email with several recipients (it names none)."""
    value = headers.get("List-Unsubscribe")
    if value is None or key is None:
        return headers
    own = _UNSUBSCRIBE_URL.sub(lambda m: f"/u/{unsubscribe_token(m.group(1), recipient, key)}>", value)
    return {**headers, "List-Unsubscribe": own}


def _recipient_headers(email: Mapping[str, Any]) -> str:
    """To (the first recipient with its name, then `to_extra`), Cc and Reply-To. Bcc is envelope only:
    it is never written into any header. Suppressed recipients stay in the headers: the message is
    what was stored, only the envelope leaves them out."""
    to_extra, cc, reply_to = email.get("to_extra"), email.get("cc"), email.get("reply_to")
    to = [email["recipient_email"], *(to_extra or ())]
    head = _address_list_header("To", to, email.get("recipient_name"))
    if cc:
        head += _address_list_header("Cc", cc)
    if reply_to:
        head += _address_list_header("Reply-To", reply_to)
    return head
