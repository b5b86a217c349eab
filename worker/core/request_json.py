"""One JSON line of `mailroom enqueue` as an `EmailRequest`'s fields: types checked, the field at fault named."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from worker.core.attachments import Attachment, attachments_from_json
from worker.core.validation import ValidationError


def _parse_time(value: object, field: str = "scheduled_for") -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(field, "must be an ISO 8601 timestamp string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(field, f"{value!r} is not an ISO 8601 timestamp") from None
    if parsed.tzinfo is None:
        raise ValidationError(field, "include a UTC offset, e.g. 2026-11-21T09:00:00Z")
    return parsed


_TEXT_FIELDS = frozenset(
    {
        "to",
        "to_name",
        "subject",
        "text",
        "html",
        "template",
        "locale",
        "idempotency_key",
        "campaign_id",
        "reference_type",
        "reference_id",
        "stream",
        "from_email",
        "from_name",
    }
)
_INT_FIELDS = frozenset({"priority", "max_retries"})
# One address or a list of addresses.
_ADDRESS_FIELDS = frozenset({"to", "cc", "bcc", "reply_to"})
FIELDS = (
    _TEXT_FIELDS
    | _INT_FIELDS
    | _ADDRESS_FIELDS
    | {"data", "headers", "transactional", "track", "scheduled_for", "expires_at", "attachments"}
)


# An `EmailRequest`'s fields in order, as checked from one JSON line.
Fields = tuple[
    str | Sequence[str],
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
    Mapping[str, Any] | None,
    int,
    datetime | None,
    str | None,
    str | None,
    Mapping[str, str] | None,
    int | None,
    bool | None,
    str | None,
    str | None,
    bool | None,
    Sequence[str] | None,
    Sequence[str] | None,
    Sequence[str] | None,
    datetime | None,
    Sequence[Attachment] | None,
    str | None,
    str | None,
    str | None,
]


def json_fields(obj: object) -> Fields:
    """Check one decoded JSON line's types and return its values in `EmailRequest` field order."""
    if not isinstance(obj, dict):
        raise ValidationError("line", "each line must be a JSON object")
    # One pass over the keys the line actually has: this runs once per line of a bulk load.
    for key, value in obj.items():
        if value is None:
            continue
        if key in _TEXT_FIELDS:
            if type(value) is not str and not (key in _ADDRESS_FIELDS and _string_list(value)):
                raise ValidationError(key, f"must be a string, got {type(value).__name__}")
        elif key in _INT_FIELDS:
            if type(value) is not int:
                raise ValidationError(key, "must be a whole number")
        elif key == "data":
            if type(value) is not dict:
                raise ValidationError("data", "must be a JSON object")
        elif key == "headers":
            if type(value) is not dict or not all(type(v) is str for v in value.values()):
                raise ValidationError("headers", "must be a JSON object of string values")
        elif key in _ADDRESS_FIELDS:
            if type(value) is not str and not _string_list(value):
                raise ValidationError(key, "must be an address or a list of addresses")
        elif key in ("transactional", "track"):
            if type(value) is not bool:
                raise ValidationError(key, "must be true or false")
        elif key not in ("scheduled_for", "expires_at", "attachments"):
            raise ValidationError(key, f"unknown field; known fields: {', '.join(sorted(FIELDS))}")
    get = obj.get
    to = get("to")
    if to is None:
        raise ValidationError("to", "an email address is required")
    return (
        to,
        get("subject"),
        get("text"),
        get("html"),
        get("to_name"),
        get("template"),
        get("locale"),
        get("data"),
        get("priority") or 0,
        _parse_time(get("scheduled_for")),
        get("idempotency_key"),
        get("campaign_id"),
        get("headers"),
        get("max_retries"),
        get("transactional"),
        get("reference_type"),
        get("reference_id"),
        get("track"),
        _listed(get("cc")),
        _listed(get("bcc")),
        _listed(get("reply_to")),
        _parse_time(get("expires_at"), "expires_at"),
        attachments_from_json(get("attachments")),
        get("stream"),
        get("from_email"),
        get("from_name"),
    )


def _string_list(value: object) -> bool:
    return type(value) is list and all(type(v) is str for v in value)


def _listed(value: str | list[str] | None) -> list[str] | None:
    return [value] if isinstance(value, str) else value
