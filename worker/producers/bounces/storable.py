"""Text from a report made storable: no NUL, no lone surrogate, no field longer than its column wants.

PostgreSQL refuses a NUL in text and psycopg cannot encode a lone surrogate (the `email` package
turns every undecodable byte into one), so either would fail a report forever: the database error
looked like an outage, the MTA was told to try again, and tried for days. Cleaning is lossy on
purpose; the message's own bytes are what the quarantine keeps when anyone needs them.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


def storable(value: str, limit: int) -> str:
    """`value` as valid UTF-8 text without NUL, at most `limit` characters."""
    # Cut first (a bounded amount of work for a giant field), with room for what decoding may add.
    text = value[: limit * 4]
    try:
        # Surrogates the `email` package made of raw bytes: decoded again, UTF-8 where they were.
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # A lone surrogate that stands for no byte (an encoded word, JSON's \ud800): replaced.
        data = text.encode("utf-8", "surrogatepass")
    return data.decode("utf-8", "replace").replace("\x00", REPLACEMENT)[:limit]


def storable_or_none(value: str | None, limit: int) -> str | None:
    """`storable` for an optional field."""
    return None if value is None else storable(value, limit)
