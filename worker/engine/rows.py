"""The rows the engine reads, typed: an email as the claim returns it, built by psycopg's row factory."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row


@dataclass(frozen=True, slots=True)
class ClaimedEmail:
    """One row of `queue_sql.CLAIM`: an email the claim decided about, with what building it needs.

    `status` is what the claim made of it: assigned (to send), suppressed, failed (expired) or pending
    (held back by the soft-bounce policy). `dropped` maps the lower-cased addresses of a
    many-recipient email's suppressed recipients to the reason (None for a one-recipient email)."""

    id: int
    status: str
    last_error: str | None
    recipient_email: str
    recipient_name: str | None
    subject: str
    text_body: str | None
    html_body: str | None
    headers: dict[str, Any]
    created_at: datetime
    retry_count: int
    max_retries: int
    campaign_id: str | None
    suppression_reason: str | None
    to_extra: list[str] | None
    cc: list[str] | None
    bcc: list[str] | None
    reply_to: list[str] | None
    dropped: dict[str, str] | None
    # What Feedback-ID and the footer need (`worker.core.campaign_mail.dress_for`).
    transactional: bool | None = None
    template: str | None = None
    reference_type: str | None = None
    # How many files it carries, and once read for building (`worker.engine.files`) each file with
    # its base64 lines.
    attachments: int = 0
    # Its own From (None: the sender account's).
    from_email: str | None = None
    from_name: str | None = None
    files: tuple[tuple[Any, bytes], ...] = ()

    def as_row(self) -> dict[str, Any]:
        """The email as a plain row, column name to value: how `worker.core.message` reads a stored email
        (producers and tests hand it plain rows too)."""
        return dict(zip(_NAMES, _values(self), strict=True))


_NAMES = tuple(f.name for f in dataclasses.fields(ClaimedEmail))
# One C call for every field: a message is built from each claimed email, thousands a second.
_values: Callable[[ClaimedEmail], tuple[Any, ...]] = operator.attrgetter(*_NAMES)

# The cursor row factory of the claim statement.
claimed_email = class_row(ClaimedEmail)
