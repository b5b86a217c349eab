"""The event types an endpoint may ask for, as the database names them (revision 0014 checks the
same list: tests/hooks/test_webhook_events.py holds the two together)."""

from __future__ import annotations

from collections.abc import Iterable

EMAIL_EVENTS = (
    "sent",
    "bounced",
    "complained",
    "opened",
    "clicked",
    "unsubscribed",
    "failed",
    "expired",
    "suppressed",
    "cancelled",
)
EVENT_TYPES: tuple[str, ...] = (*(f"email.{name}" for name in EMAIL_EVENTS), "document.signed")
# The short names the command line takes (`--events sent,bounced`), each to its type.
SHORT_NAMES = {event.split(".", 1)[1]: event for event in EVENT_TYPES}


class UnknownEvent(ValueError):
    """An event name that is no event type."""


def event_types(names: Iterable[str]) -> list[str]:
    """The types named by `names` (short names, full types or `all`), each once, in the canonical order."""
    wanted: set[str] = set()
    for raw in names:
        name = raw.strip().lower()
        if not name:
            continue
        if name == "all":
            wanted.update(EVENT_TYPES)
        elif name in SHORT_NAMES:
            wanted.add(SHORT_NAMES[name])
        elif name in EVENT_TYPES:
            wanted.add(name)
        else:
            known = ", ".join(SHORT_NAMES)
            raise UnknownEvent(f"{raw.strip()!r} is no event; events are {known}, or all")
    if not wanted:
        raise UnknownEvent("name at least one event (or all)")
    return [event for event in EVENT_TYPES if event in wanted]
