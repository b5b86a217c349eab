"""What enqueueing answers: the email's id, and whether it was stored suppressed (and why)."""

from __future__ import annotations

from typing import Any


class Enqueued(int):
    """An enqueued email's id (an `int`, as before) that also tells whether it will be sent.

    An email whose every recipient is on the suppression list (a hard bounce, a complaint, an
    operator's suppression, three soft bounces, or an unsubscribe for non-transactional email) is
    stored with status `suppressed` at once: `suppressed` is then True and `suppression_reason`
    says why to a role that may read the suppression list (SELECT on mailroom.bounce_list), and to
    any other only that the address is on it (mailroom.suppression_told): one tenant never learns
    how another's mail listed an address. For a repeated idempotency key it describes the first
    email as it is now.
    """

    __module__ = "mailroom"
    suppression_reason: str | None

    def __new__(cls, email_id: int, suppression_reason: str | None = None) -> Enqueued:
        """The id `email_id`, suppressed for `suppression_reason` when that is not None."""
        made = super().__new__(cls, email_id)
        made.suppression_reason = suppression_reason
        return made

    @property
    def suppressed(self) -> bool:
        """Whether the email was stored `suppressed`: it will not be sent."""
        return self.suppression_reason is not None

    def __str__(self) -> str:
        # The digits, as before: an id goes into URLs, logs and f-strings (object.__str__ would use repr).
        return int.__repr__(self)

    def __repr__(self) -> str:
        if self.suppression_reason is None:
            return f"Enqueued({int(self)})"
        return f"Enqueued({int(self)}, suppressed: {self.suppression_reason!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Enqueued, (int(self), self.suppression_reason))


def from_row(row: tuple[Any, ...]) -> Enqueued:
    """The answer from a row of (id, suppression reason or NULL)."""
    return Enqueued(int(row[0]), row[1] if len(row) > 1 else None)


def _dump_as_bigint() -> None:
    """Dump an `Enqueued` as the bigint it is, whatever its size.

    psycopg dumps an int subclass in a list with the dumper chosen for the list's last item (an
    int2 for a small id), so `[Enqueued(1), Enqueued(40000)]` would not fit; ids are bigint."""
    import psycopg
    from psycopg.types.numeric import Int8BinaryDumper, Int8Dumper

    psycopg.adapters.register_dumper(Enqueued, Int8Dumper)
    psycopg.adapters.register_dumper(Enqueued, Int8BinaryDumper)


_dump_as_bigint()
