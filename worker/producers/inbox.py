"""The inbox for external order events: each event is recorded once and its email enqueued in the same transaction.

An event is keyed by (message id, consumer). The first delivery of a key inserts the inbox row and
enqueues the email; every later delivery of the same key, replayed or concurrent, only counts itself
(`receive_count`) and returns the first email's id. PostgreSQL decides which delivery is first: the
insert of a second transaction waits on the first one's uncommitted row and then sees the conflict.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Set
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from worker.core import tracing
from worker.core.config import Settings
from worker.core.enqueue_trace import traced
from worker.core.masking import mask_address
from worker.core.outbox import EmailRequest, enqueue, load_catalog
from worker.core.templates import builtin_templates
from worker.core.validation import ValidationError, check_header_text

log = logging.getLogger(__name__)

# Event type -> template; the template's name is the event type.
EVENT_TYPES = ("order_placed", "order_completed", "order_cancelled")

# Fields each event type's payload must carry for its template.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "order_placed": ("customer_email", "customer_name", "order_number", "items", "total", "currency"),
    "order_completed": ("customer_email", "customer_name", "order_number", "items", "total", "currency"),
    "order_cancelled": ("customer_email", "customer_name", "order_number", "total", "currency"),
}
_LOCALE = re.compile(r"^[a-z]{2}(-[A-Z]{2})?$")
# Amounts (and quantity times unit price) stay below this: a typo of many digits is an error, not an email.
MAX_AMOUNT = Decimal(10) ** 12
MAX_QUANTITY = 1_000_000
DEFAULT_CONSUMER = "mailroom"
# The fields of an event line: the event, then what it carries of its producer's trace (optional).
_FIELDS_SHOWN = ("message_id", "consumer", "type", "payload", "correlation_id", "traceparent", "tracestate")
_FIELDS = frozenset(_FIELDS_SHOWN)

_RECORD = """
INSERT INTO mailroom.inbox (message_id, consumer, event_type, payload)
VALUES (%s, %s, %s, %s)
ON CONFLICT (message_id, consumer) DO UPDATE SET receive_count = mailroom.inbox.receive_count + 1
RETURNING xmax = 0 AS inserted, email_id, event_type
"""
_MARK_PROCESSED = (
    "UPDATE mailroom.inbox SET email_id = %s, processed_at = now() WHERE message_id = %s AND consumer = %s"
)


@dataclass(frozen=True)
class EventTrace:
    """What an event carries of its producer's trace: W3C trace context and a correlation id (all optional)."""

    traceparent: str | None = None
    tracestate: str | None = None
    correlation_id: str | None = None

    def parent(self) -> Any:
        """The producer's span as the parent of the ingest's span (None: none, or unreadable)."""
        return tracing.parent_from(self.traceparent, self.tracestate)


def event_trace(obj: Mapping[str, Any]) -> EventTrace:
    """The trace fields of one decoded event line. A malformed traceparent is ignored, as W3C Trace Context
    says (a new trace starts); a correlation id must be 1 to 255 printable characters, since it is stored."""
    correlation_id = obj.get("correlation_id")
    if correlation_id is not None and (
        not isinstance(correlation_id, str)
        or not 1 <= len(correlation_id) <= 255
        or not correlation_id.isprintable()
    ):
        raise ValidationError("correlation_id", "must be a string of 1 to 255 printable characters")
    traceparent = obj.get("traceparent")
    tracestate = obj.get("tracestate")
    if not tracing.valid_traceparent(traceparent):
        return EventTrace(correlation_id=correlation_id)
    return EventTrace(traceparent, tracestate if isinstance(tracestate, str) else None, correlation_id)


@dataclass(frozen=True)
class IngestResult:
    """What ingesting one event did: the email it produced (or produced the first time) and whether it was a repeat."""

    email_id: int
    duplicate: bool


def _text(payload: Mapping[str, Any], name: str, limit: int = 255) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"payload.{name}", "must be a non-empty string")
    if len(value) > limit:
        raise ValidationError(f"payload.{name}", f"longer than {limit} characters")
    return value.strip()


def _amount(field: str, value: object) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValidationError(field, "must be a number or a decimal string such as 12.50")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise ValidationError(field, f"{value!r} is not a decimal amount") from None
    if not amount.is_finite() or amount < 0:
        raise ValidationError(field, "must be a finite amount of zero or more")
    if amount >= MAX_AMOUNT:
        raise ValidationError(field, f"must be less than {MAX_AMOUNT:,}")
    return amount


def _locale(value: object) -> str | None:
    """Shops write `fr_FR`, `fr-fr` or `FR`: each becomes the catalog's form (`fr-FR`, `fr`)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValidationError("payload.locale", "must be a string such as 'en' or 'fr-CA'")
    language, _, region = value.strip().replace("_", "-").partition("-")
    locale = f"{language.lower()}-{region.upper()}" if region else language.lower()
    if not _LOCALE.match(locale):
        raise ValidationError("payload.locale", f"{value!r} is not a locale such as 'en' or 'fr-CA'")
    return locale


def _known_locale(locale: str, known: Set[str]) -> bool:
    return locale in known or locale.split("-")[0] in known


@cache
def _builtin_locales() -> frozenset[str]:
    """Locales of the templates shipped with Mailroom: known without asking the database."""
    return frozenset(t.locale for t in builtin_templates())


def format_money(amount: Decimal, currency: str, locale: str | None) -> str:
    """Write an amount the way the reader's language does: `1,234.50 EUR` or, in French, `1 234,50 EUR`."""
    text = f"{amount.quantize(Decimal('0.01')):,}"
    if (locale or "").split("-")[0] == "fr":
        text = text.replace(",", "\u202f").replace(".", ",")
    return f"{text} {currency}"


def _items(payload: Mapping[str, Any], currency: str, locale: str | None) -> list[dict[str, Any]]:
    raw = payload.get("items")
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw:
        raise ValidationError("payload.items", "must be a non-empty list of {name, quantity, unit_price}")
    items: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        where = f"payload.items[{index}]"
        if not isinstance(item, dict):
            raise ValidationError(where, "must be an object with name and quantity")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValidationError(f"{where}.name", "must be a non-empty string")
        quantity = item.get("quantity", 1)
        if isinstance(quantity, bool) or not isinstance(quantity, int) or not 1 <= quantity <= MAX_QUANTITY:
            raise ValidationError(f"{where}.quantity", f"must be a whole number from 1 to {MAX_QUANTITY:,}")
        line: dict[str, Any] = {"name": name.strip(), "quantity": quantity, "line_total": None}
        if item.get("unit_price") is not None:
            price = _amount(f"{where}.unit_price", item["unit_price"])
            if price * quantity >= MAX_AMOUNT:
                raise ValidationError(f"{where}.unit_price", f"times quantity is {MAX_AMOUNT:,} or more")
            line["line_total"] = format_money(price * quantity, currency, locale)
        items.append(line)
    return items


def template_data(event_type: str, payload: Mapping[str, Any]) -> tuple[str, str, str | None, dict[str, Any]]:
    """Check an event's payload and return (recipient, name, locale, data for its template).

    Raises `ValidationError` naming the first missing or malformed field.
    """
    if event_type not in REQUIRED_FIELDS:
        raise ValidationError("type", f"unknown event type {event_type!r}; known: {', '.join(EVENT_TYPES)}")
    if not isinstance(payload, Mapping):
        raise ValidationError("payload", "must be a JSON object")
    missing = [name for name in REQUIRED_FIELDS[event_type] if payload.get(name) in (None, "", [])]
    if missing:
        raise ValidationError(
            f"payload.{missing[0]}",
            f"{event_type} needs {', '.join(missing)} (required: {', '.join(REQUIRED_FIELDS[event_type])})",
        )
    email = _text(payload, "customer_email", 254)
    name = check_header_text("payload.customer_name", _text(payload, "customer_name", 255))
    locale = _locale(payload.get("locale"))
    currency = _text(payload, "currency", 3).upper()
    if not currency.isalpha() or len(currency) != 3:
        raise ValidationError("payload.currency", "must be a three-letter ISO 4217 code such as EUR")
    reason = payload.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValidationError("payload.reason", "must be a string")
    data = {
        "customer_name": name,
        # The order number is part of the subject: no line breaks or other control characters.
        "order_number": check_header_text("payload.order_number", _text(payload, "order_number", 100)),
        "items": _items(payload, currency, locale),
        "total": format_money(_amount("payload.total", payload["total"]), currency, locale),
        "reason": reason or None,
    }
    return email, name, locale, data


def _has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


def payload_json(payload: Mapping[str, Any]) -> str:
    """The payload as the JSON text the inbox stores; what PostgreSQL's jsonb cannot hold is a `ValidationError`."""
    try:
        text = json.dumps(payload, allow_nan=False)
    except ValueError:
        raise ValidationError(
            "payload", "holds NaN or an infinite number (e.g. 1e400), which JSON cannot store"
        ) from None
    except TypeError as exc:
        raise ValidationError("payload", f"cannot be written as JSON: {exc}") from None
    if _has_nul(payload):
        raise ValidationError("payload", "holds a NUL character (\\u0000), which PostgreSQL cannot store")
    return text


def _check_key(field: str, value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 255:
        raise ValidationError(field, "must be a string of 1 to 255 characters")
    if "\x00" in value:
        raise ValidationError(field, "holds a NUL character (\\u0000), which PostgreSQL cannot store")
    return value


def idempotency_key(message_id: str, consumer: str) -> str:
    """The queue's idempotency key for an inbox event: a second guard against two emails for one key."""
    digest = hashlib.sha256(f"{consumer}\x00{message_id}".encode()).hexdigest()
    return f"inbox:{digest}"


def _usable_locale(
    conn: psycopg.Connection[Any], settings: Settings, locale: str | None, message_id: str
) -> str | None:
    """The locale if a template is written in it, else None (the default locale).

    An order email in English beats none at all (rejecting it would leave the customer without their
    confirmation). The shipped templates' locales are known without a query; only others ask the
    database's catalog."""
    if (
        locale is not None
        and not _known_locale(locale, _builtin_locales())
        and not _known_locale(locale, load_catalog(conn, settings).locales)
    ):
        log.info("inbox: no %s templates; message %s gets the default locale", locale, message_id)
        return None
    return locale


def ingest_event(
    conn: psycopg.Connection[Any],
    message_id: str,
    consumer: str,
    event_type: str,
    payload: Mapping[str, Any],
    *,
    settings: Settings | None = None,
    trace: EventTrace | None = None,
) -> IngestResult:
    """Record one external event in the inbox and enqueue its email, atomically.

    `trace` is what the event carried of its producer's trace (`event_trace`): the span of this
    ingest continues that trace, and the email keeps the event's correlation id (its message id when
    it has none) and the trace context, so its delivery spans continue it too.

    Runs in a transaction of its own, or in a savepoint of the caller's open transaction (which then
    decides when it commits). A repeated (message_id, consumer) stores no second email and returns
    the first one's id. An unknown type or a payload missing a field its template needs raises
    `ValidationError` and stores nothing. A locale no template is written in falls back to the default
    locale; a malformed one is an error.
    """
    trace = trace or EventTrace()
    attributes = {"mailroom.event.type": event_type, "mailroom.inbox.consumer": consumer[:255]}
    with tracing.span("mailroom.inbox.event", attributes, parent=trace.parent(), kind="consumer") as span:
        got = _ingest(conn, message_id, consumer, event_type, payload, settings, trace.correlation_id)
        tracing.note(span, {"mailroom.email.id": got.email_id, "mailroom.inbox.duplicate": got.duplicate})
        return got


def _ingest(
    conn: psycopg.Connection[Any],
    message_id: str,
    consumer: str,
    event_type: str,
    payload: Mapping[str, Any],
    settings: Settings | None,
    correlation_id: str | None,
) -> IngestResult:
    _check_key("message_id", message_id)
    _check_key("consumer", consumer)
    recipient, name, locale, data = template_data(event_type, payload)
    stored = payload_json(payload)
    settings = settings or Settings.from_env()
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        got = cur.execute(_RECORD, (message_id, consumer, event_type, stored)).fetchone()
        assert got is not None
        inserted, email_id, first_type = bool(got[0]), got[1], got[2]
        if not inserted:
            if first_type != event_type:
                log.warning(
                    "inbox: message %s for %s was first %s, now %s; kept the first",
                    message_id,
                    consumer,
                    first_type,
                    event_type,
                )
            assert email_id is not None
            return IngestResult(int(email_id), duplicate=True)
        locale = _usable_locale(conn, settings, locale, message_id)
        # Without a correlation id of its own, the event is known by its message id.
        with traced(conn, correlation_id or (message_id if message_id.isprintable() else None)):
            email_id = enqueue(
                conn,
                EmailRequest(
                    to=recipient,
                    to_name=name,
                    template=event_type,
                    locale=locale,
                    data=data,
                    idempotency_key=idempotency_key(message_id, consumer),
                    reference_type=event_type,
                    reference_id=data["order_number"],
                ),
                settings=settings,
                created_by=f"inbox:{consumer}"[:255],
            )
        cur.execute(_MARK_PROCESSED, (email_id, message_id, consumer))
    log.info("inbox: %s %s -> email %s to %s", event_type, message_id, email_id, mask_address(recipient))
    return IngestResult(email_id, duplicate=False)


def parse_event(
    obj: object, default_consumer: str = DEFAULT_CONSUMER
) -> tuple[str, str, str, dict[str, Any]]:
    """Turn one decoded JSON line into (message_id, consumer, type, payload), naming the field at fault."""
    if not isinstance(obj, dict):
        raise ValidationError("line", "each line must be a JSON object")
    unknown = sorted(set(obj) - _FIELDS)
    if unknown:
        raise ValidationError(unknown[0], f"unknown field; known fields: {', '.join(_FIELDS_SHOWN)}")
    message_id = _check_key("message_id", obj.get("message_id"))
    consumer = _check_key("consumer", obj.get("consumer", default_consumer))
    event_type = obj.get("type")
    if not isinstance(event_type, str):
        raise ValidationError("type", f"must be one of {', '.join(EVENT_TYPES)}")
    payload = obj.get("payload")
    if not isinstance(payload, dict):
        raise ValidationError("payload", "must be a JSON object")
    return message_id, consumer, event_type, payload
