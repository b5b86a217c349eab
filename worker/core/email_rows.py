"""An email request checked and rendered into the row the queue stores: pure, no database.

Every way into the queue (`worker.core.outbox`: one or many, sync or async; the bulk command's COPY,
`worker.core.bulk`) turns a request into its row here, with what the database knows of campaigns
handed in as a `CampaignBook` (`worker.core.campaign_mail`), so a content or campaign rule is
written once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from worker.core import links as tracking
from worker.core.attachments import Attachment
from worker.core.campaign_mail import NO_CAMPAIGNS, CampaignBook
from worker.core.config import Settings
from worker.core.email_routes import lifetime_and_files, sending
from worker.core.request_json import json_fields
from worker.core.templates import TemplateCatalog
from worker.core.validation import ValidationError, check_header_name, check_header_text, normalise_address


@dataclass(frozen=True)
class EmailRequest:
    """One email to enqueue: literal content, or a template with its data (rendered now, stored as sent).

    `to` is one address or several (the first is the email's recipient in lists, logs and suppression);
    `cc`, `bcc` and `reply_to` are lists; Bcc goes in the envelope only, never in a header."""

    to: str | Sequence[str]
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    to_name: str | None = None
    template: str | None = None
    locale: str | None = None
    data: Mapping[str, Any] | None = None
    priority: int = 0
    scheduled_for: datetime | None = None
    idempotency_key: str | None = None
    campaign_id: str | None = None
    headers: Mapping[str, str] | None = field(default_factory=dict)  # None, like {}, means none
    max_retries: int | None = None
    transactional: bool | None = None
    reference_type: str | None = None
    reference_id: str | None = None
    # open and click tracking: None = on for campaign email (MAILROOM_TRACK_CAMPAIGNS), off otherwise
    track: bool | None = None
    cc: Sequence[str] | None = None
    bcc: Sequence[str] | None = None
    reply_to: Sequence[str] | None = None
    # past it the email is never sent: it ends failed, expired (a one-time code's expiry, say)
    expires_at: datetime | None = None
    attachments: Sequence[Attachment] | None = None
    # the message stream (None: transactional, or broadcast for email that is not), and an own From
    stream: str | None = None
    from_email: str | None = None
    from_name: str | None = None


# Column order shared by the single INSERT and the bulk COPY.
COLUMNS = (
    "recipient_email",
    "recipient_name",
    "subject",
    "text_body",
    "html_body",
    "headers",
    "template",
    "locale",
    "template_data",
    "priority",
    "scheduled_for",
    "max_retries",
    "idempotency_key",
    "campaign_id",
    "transactional",
    "reference_type",
    "reference_id",
    "created_by",
    "tracking_token",
    "unsubscribe_token",
    "track_opens",
    "track_clicks",
    "to_extra",
    "cc",
    "bcc",
    "reply_to",
    "expires_at",
    "stream",
    "from_email",
    "from_name",
)
# A prepared row is COLUMNS followed by three more items: the email's tracked links, (token, url) each,
# the dress the worker is to apply (JSON text, or None when applied or none is owed), and its files
# (`worker.core.attachments.File`, none for most).
LINKS = len(COLUMNS)
DRESS = LINKS + 1
FILES = LINKS + 2


def request_from_json(obj: object) -> EmailRequest:
    """Turn one decoded JSON object into an `EmailRequest`, naming the field at fault when it cannot."""
    return EmailRequest(*json_fields(obj))


def _check_short(field_name: str, value: str | None, limit: int) -> None:
    if value is not None and not 1 <= len(value) <= limit:
        raise ValidationError(field_name, f"must be 1 to {limit} characters")


def prepare(
    request: EmailRequest,
    catalog: TemplateCatalog | None,
    settings: Settings,
    created_by: str | None = None,
    book: CampaignBook | None = None,
    *,
    dress_here: bool = True,
) -> tuple[Any, ...]:
    """Validate and render one request into the row that will be stored (`COLUMNS` order, then `LINKS`,
    then `DRESS`).

    `book` is what the database says of the request's campaign (`outbox` asks it); without one, no
    campaign has a postal address of its own and only `settings.postal_address` lets campaign email in.
    Campaign dress (tracking, the unsubscribe link) is applied here, or with `dress_here` false only
    asked for (`DRESS`): an application role's email is dressed by the worker, whose tokens it never sees."""
    r = request
    return _prepare_fields(
        r.to,
        r.subject,
        r.text,
        r.html,
        r.to_name,
        r.template,
        r.locale,
        r.data,
        r.priority,
        r.scheduled_for,
        r.idempotency_key,
        r.campaign_id,
        r.headers,
        r.max_retries,
        r.transactional,
        r.reference_type,
        r.reference_id,
        r.track,
        r.cc,
        r.bcc,
        r.reply_to,
        r.expires_at,
        r.attachments,
        r.stream,
        r.from_email,
        r.from_name,
        catalog,
        settings,
        created_by,
        book,
        dress_here,
    )


def prepare_json(
    obj: object,
    catalog: TemplateCatalog | None,
    settings: Settings,
    created_by: str | None = None,
    book: CampaignBook | None = None,
) -> tuple[Any, ...]:
    """`prepare(request_from_json(obj), ...)` without building the request: the bulk path, once per line."""
    return _prepare_fields(*json_fields(obj), catalog, settings, created_by, book)


def is_transactional(campaign_id: str | None, transactional: bool | None) -> bool:
    """Whether an email is transactional: as the request says, else when it is of no campaign."""
    return campaign_id is None if transactional is None else transactional


def dressed(track: bool | None, transactional: bool) -> bool:
    """Whether an email gets tracking or unsubscribe dress, and so its campaign's policy (`CampaignBook`)."""
    return bool(track) or not transactional


def needs_dress(request: EmailRequest) -> bool:
    """Whether this request's email gets tracking or an unsubscribe link."""
    return dressed(request.track, is_transactional(request.campaign_id, request.transactional))


def campaign_to_ask(request: EmailRequest) -> str | None:
    """The campaign whose policy (`mailroom.campaign_mail_policy`) this request's row needs, if any."""
    campaign_id = request.campaign_id
    if campaign_id is None or not dressed(
        request.track, is_transactional(campaign_id, request.transactional)
    ):
        return None
    return campaign_id


def campaigns_to_ask(requests: Iterable[EmailRequest]) -> list[str]:
    """The campaigns whose policy these requests' rows need, each once, sorted."""
    return sorted({c for request in requests if (c := campaign_to_ask(request)) is not None})


def address_array(addresses: Sequence[str]) -> str:
    """A `text[]` literal of addresses `prepare` normalised: atext holds no quote, backslash or white
    space but may hold braces, so each element is quoted and needs no escape."""
    return "{" + ",".join(f'"{a}"' for a in addresses) + "}"


# One parameter per `EmailRequest` field, in its order: building the request costs more than the checks.
def _prepare_fields(
    to: str | Sequence[str],
    subject: str | None,
    text: str | None,
    html: str | None,
    to_name: str | None,
    template: str | None,
    locale: str | None,
    data: Mapping[str, Any] | None,
    priority: int,
    scheduled_for: datetime | None,
    idempotency_key: str | None,
    campaign_id: str | None,
    headers: Mapping[str, str] | None,
    max_retries: int | None,
    transactional: bool | None,
    reference_type: str | None,
    reference_id: str | None,
    track: bool | None,
    cc: Sequence[str] | None,
    bcc: Sequence[str] | None,
    reply_to: Sequence[str] | None,
    expires_at: datetime | None,
    attachments: Sequence[Attachment] | None,
    stream: str | None,
    from_email: str | None,
    from_name: str | None,
    catalog: TemplateCatalog | None,
    settings: Settings,
    created_by: str | None,
    book: CampaignBook | None = None,
    dress_here: bool = True,
) -> tuple[Any, ...]:
    if headers is None:  # no headers: from Python (EmailRequest) as from a JSON line's "headers": null
        headers = {}
    recipient, more = _addressing(to, to_name, headers, cc, bcc, reply_to, settings)
    given_locale = locale
    if template is not None:
        subject, text, html, locale = _render(catalog, template, locale, data, subject, text, html)
    elif data is not None:
        raise ValidationError("data", "data is only used with a template")
    subject = _check_content(subject, text, html, to_name, settings)
    max_retries = _check_limits(priority, max_retries, idempotency_key, campaign_id, settings)
    files = lifetime_and_files(expires_at, scheduled_for, attachments, html, settings)
    transactional = is_transactional(campaign_id, transactional)
    sender = sending(stream, from_email, from_name, transactional)
    tracked, dress = _UNDRESSED
    # The one check the common bulk case pays: transactional email without tracking adds nothing.
    if dressed(track, transactional):
        html, headers, tracked, dress = _dressing(
            html, headers, track, transactional, campaign_id, settings, book or NO_CAMPAIGNS, dress_here
        )
    # In `COLUMNS` order, then the tracked links, the dress the worker is to apply (or None), the files.
    return (
        recipient, to_name, subject, text, html, json.dumps(headers) if headers else "{}", template,
        locale if template else given_locale, json.dumps(data) if data is not None else None, priority,
        scheduled_for, max_retries, idempotency_key, campaign_id, transactional, reference_type,
        reference_id, created_by, *_tracking_columns(tracked), *more, expires_at,
        *sender, _links(tracked), dress, files,
    )  # fmt: skip


_ONE_RECIPIENT: tuple[list[str] | None, ...] = (None, None, None, None)
_UNDRESSED: tuple[tracking.Tracking | None, str | None] = (None, None)


def _addressing(
    to: str | Sequence[str],
    to_name: str | None,
    headers: Mapping[str, str],
    cc: Sequence[str] | None,
    bcc: Sequence[str] | None,
    reply_to: Sequence[str] | None,
    settings: Settings,
) -> tuple[str, tuple[list[str] | None, ...]]:
    """The first To address and the columns of the other recipients (none, in the common case)."""
    if type(to) is str and cc is None and bcc is None and reply_to is None:  # the common case, first
        return _check_addressing(to, to_name, headers), _ONE_RECIPIENT
    to = [to] if isinstance(to, str) else list(to)
    if not to:
        raise ValidationError("to", "at least one address is required")
    recipient = _check_addressing(to[0], to_name, headers)
    lists = (
        _address_list("to", to[1:]),
        _address_list("cc", cc),
        _address_list("bcc", bcc),
        _address_list("reply_to", reply_to),
    )
    count = 1 + sum(len(found) for found in lists[:3] if found)
    if count > settings.max_recipients or len(lists[3] or ()) > settings.max_recipients:
        raise ValidationError(
            "to", f"more than {settings.max_recipients} recipients (MAILROOM_MAX_RECIPIENTS)"
        )
    return recipient, lists


def _address_list(field_name: str, addresses: Sequence[str] | None) -> list[str] | None:
    """Normalised addresses of one list (None for none); each checked, named by its position."""
    if addresses is None:
        return None
    if isinstance(addresses, str):
        addresses = [addresses]
    found = [normalise_address(f"{field_name}[{i}]", a) for i, a in enumerate(addresses, 1)]
    return found or None


def _dressing(
    html: str | None,
    headers: Mapping[str, str],
    track: bool | None,
    transactional: bool,
    campaign_id: str | None,
    settings: Settings,
    book: CampaignBook,
    dress_here: bool,
) -> tuple[str | None, Mapping[str, str], tracking.Tracking | None, str | None]:
    """Campaign dress (tracking, the unsubscribe link) applied here, or with `dress_here` false only asked
    for: html, headers, what tracking made and the dress the worker is to apply."""
    book.require_postal_address(campaign_id, transactional, settings.postal_address)
    if (
        not dress_here
    ):  # the worker dresses it, with tokens the application never sees (`mailroom.enqueue_rows`)
        return html, headers, None, json.dumps({"track": track})
    tracked = _tracked(html, headers, track, transactional, campaign_id, settings, book.opens(campaign_id))
    return tracked.html, tracked.headers, tracked, None


def _tracked(
    html: str | None,
    headers: Mapping[str, str],
    track: bool | None,
    transactional: bool,
    campaign_id: str | None,
    settings: Settings,
    opens: bool = True,
) -> tracking.Tracking:
    """The HTML and headers with tracking and unsubscribe applied as this email wants them."""
    wanted = tracking.wants_tracking(track, transactional, campaign_id, settings)
    return tracking.apply(
        html, headers, track=wanted, transactional=transactional, settings=settings, opens=opens
    )


def _tracking_columns(tracked: tracking.Tracking | None) -> tuple[Any, ...]:
    """Tracking token, unsubscribe token, opens and clicks: as applied, or none."""
    if tracked is None:
        return (None, None, False, False)
    return (tracked.tracking_token, tracked.unsubscribe_token, tracked.track_opens, tracked.track_clicks)


def _links(tracked: tracking.Tracking | None) -> tuple[tuple[Any, str], ...]:
    """The tracked links (token, url) of a prepared row, after its columns."""
    return () if tracked is None else tracked.links


def _check_addressing(to: str, to_name: str | None, headers: Mapping[str, str]) -> str:
    """The normalised recipient; the name and extra headers checked as header text."""
    recipient = normalise_address("to", to)
    if to_name is not None:
        check_header_text("to_name", to_name)
        _check_short("to_name", to_name, 255)
    for key, value in headers.items():
        check_header_name(key)
        check_header_text(f"headers.{key}", value)
        if len(value) > 998:
            raise ValidationError(f"headers.{key}", "longer than 998 characters")
    return recipient


def _render(
    catalog: TemplateCatalog | None,
    template: str,
    locale: str | None,
    data: Mapping[str, Any] | None,
    subject: str | None,
    text: str | None,
    html: str | None,
) -> tuple[str | None, str | None, str | None, str | None]:
    """Subject, text, html and locale from the template, where the request did not give its own."""
    if catalog is None:
        raise ValidationError("template", "no template catalog available")
    rendered = catalog.render(template, locale, data)
    return (
        subject if subject is not None else rendered.subject,
        text if text is not None else rendered.text_body,
        html if html is not None else rendered.html_body,
        rendered.locale,
    )


def render_stored(
    catalog: TemplateCatalog,
    template: str,
    locale: str | None,
    data: Mapping[str, Any] | None,
    given: tuple[str | None, str | None, str | None],
    settings: Settings,
) -> tuple[str, str | None, str | None, str | None]:
    """Subject, text, html and locale of an email stored unrendered (enqueued from SQL with a template),
    rendered and checked as `enqueue` would have; `given` subject, text and html win over the template's."""
    subject, text, html, locale = _render(catalog, template, locale, data, *given)
    return _check_content(subject, text, html, None, settings), text, html, locale


def _check_content(
    subject: str | None, text: str | None, html: str | None, to_name: str | None, settings: Settings
) -> str:
    """The subject as stored (stripped: a header cannot carry leading or trailing white space through
    folding); a body present, every part valid Unicode without NUL, sizes within the settings."""
    subject = subject.strip() if subject is not None else None
    if subject is None or not subject:
        raise ValidationError("subject", "a subject is required (or a template that renders one)")
    check_header_text("subject", subject)
    if len(subject) > settings.max_subject_chars:
        raise ValidationError("subject", f"longer than {settings.max_subject_chars} characters")
    if not (text and text.strip()) and not (html and html.strip()):
        raise ValidationError("text", "a body is required: text, html, or a template")
    _encoded_size("subject", subject)
    if to_name is not None:
        _encoded_size("to_name", to_name)
    body_bytes = sum(_encoded_size(label, part) for label, part in (("text", text), ("html", html)) if part)
    if body_bytes > settings.max_body_bytes:
        raise ValidationError(
            "text", f"body of {body_bytes} bytes exceeds the {settings.max_body_bytes}-byte limit"
        )
    return subject


def _encoded_size(label: str, content: str) -> int:
    """UTF-8 size of a text part, refusing NUL and unpaired surrogates."""
    if "\x00" in content:
        raise ValidationError(label, "contains a NUL character")
    if content.isascii():  # one byte a character and no surrogates, known without encoding
        return len(content)
    try:
        return len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(label, "contains an unpaired surrogate (not valid Unicode text)") from None


def _check_limits(
    priority: int,
    max_retries: int | None,
    idempotency_key: str | None,
    campaign_id: str | None,
    settings: Settings,
) -> int:
    """Priority, retry budget (the default when not given), key and campaign lengths; the retry budget."""
    if not -1000 <= priority <= 1000:
        raise ValidationError("priority", "must be between -1000 and 1000")
    max_retries = settings.default_max_retries if max_retries is None else max_retries
    if not 0 <= max_retries <= 100:
        raise ValidationError("max_retries", "must be between 0 and 100")
    _check_short("idempotency_key", idempotency_key, 255)
    _check_short("campaign_id", campaign_id, 100)
    return max_retries
