"""Where an email leaves from and until when: its message stream, its own From, its lifetime and its files,
checked for `worker.core.email_rows.prepare` (pure, no database)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from worker.core.attachments import Attachment, File, check_files
from worker.core.config import Settings
from worker.core.validation import ValidationError, check_header_text, normalise_address

TRANSACTIONAL, BROADCAST = "transactional", "broadcast"
_STREAM = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


_DEFAULT: dict[bool, tuple[str, str | None, str | None]] = {
    True: (TRANSACTIONAL, None, None),
    False: (BROADCAST, None, None),
}


def default_stream(transactional: bool) -> str:
    """The stream of an email that names none: transactional, or broadcast for email that is not."""
    return TRANSACTIONAL if transactional else BROADCAST


def sending(
    stream: str | None, from_email: str | None, from_name: str | None, transactional: bool
) -> tuple[str, str | None, str | None]:
    """The email's stream and its own From, checked (whether an account may send that From is the
    database's to say: `mailroom.from_refusals`); the default stream and no From for most email."""
    if stream is None and from_email is None and from_name is None:
        return _DEFAULT[transactional]
    if stream is None:
        stream = default_stream(transactional)
    elif not isinstance(stream, str) or not _STREAM.match(stream):
        raise ValidationError(
            "stream", "a name like transactional or broadcast (a-z, 0-9, _ and -, at most 32)"
        )
    if from_email is not None:
        from_email = normalise_address("from_email", from_email)
    if from_name is not None:
        if from_email is None:
            raise ValidationError("from_name", "only with a from_email")
        check_header_text("from_name", from_name)
        if not 1 <= len(from_name) <= 255:
            raise ValidationError("from_name", "must be 1 to 255 characters")
    return stream, from_email, from_name


def lifetime_and_files(
    expires_at: datetime | None,
    scheduled_for: datetime | None,
    attachments: Sequence[Attachment] | None,
    html: str | None,
    settings: Settings,
) -> tuple[File, ...]:
    """The email's own lifetime checked, and its files (none for most)."""
    if expires_at is not None:
        _check_lifetime(expires_at, scheduled_for)
    if not attachments:
        return ()
    return check_files(attachments, html, settings.max_attachment_bytes, settings.max_attachments_bytes)


def _check_lifetime(expires_at: datetime, scheduled_for: datetime | None) -> None:
    """An email's own lifetime: a time zone-aware moment after it is due."""
    if not isinstance(expires_at, datetime) or expires_at.tzinfo is None or expires_at.utcoffset() is None:
        raise ValidationError("expires_at", "must be a time zone-aware datetime")
    due = scheduled_for if scheduled_for is not None and scheduled_for.tzinfo is not None else None
    if expires_at <= (due or datetime.now(UTC)):
        raise ValidationError("expires_at", "must be later than the email is due (scheduled_for, or now)")
