"""A bounce or complaint as a provider's webhook reports it, and the outcome of applying it.

The tracker (which receives webhooks) and the bounce producers (which apply bounces) are sibling
rooms that may not import each other: this is the shape they share, and `EventSink` is how the
command line hands the producers' `apply_events` to the tracker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

EventKind = Literal["hard", "soft", "complaint"]
EventSource = Literal["webhook", "postmark", "sendgrid", "ses"]
EventVerdict = Literal["recorded", "duplicate", "unmatched"]


@dataclass(frozen=True)
class WebhookEvent:
    """One recipient's bounce or complaint, and what names the email it is about."""

    source: EventSource
    recipient: str
    kind: EventKind
    # the provider's own id of this event: the same id delivered again changes nothing again
    event_id: str | None
    # the event as received (JSON), kept when it names no email Mailroom sent
    raw: bytes
    email_id: int | None = None
    message_id: str | None = None
    status: str | None = None
    diagnostic: str | None = None
    smtp_code: int | None = None


@dataclass(frozen=True)
class EventOutcome:
    """What became of one event."""

    verdict: EventVerdict
    detail: str
    email_id: int | None = None


# Applies events in the caller's open connection, one transaction for the lot.
EventSink = Callable[[psycopg.Connection[Any], Sequence[WebhookEvent]], list[EventOutcome]]
