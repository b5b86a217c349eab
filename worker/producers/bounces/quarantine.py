"""The bounce quarantine: keeping what the intake could not read or trust, within bounds, and reading it.

Anybody on the internet can send to a bounce address, so what is kept is bounded three ways: the
first `QUARANTINE_CAP` bytes of a message (the rest is cut, and the reason says so), at most
`quarantine_client_daily_max` messages per client (SMTP peer, pipe, mailbox, webhook) per UTC day,
and `quarantine_max_bytes` in all. Past a bound a message is dropped and counted per client and day,
never stored; maintenance deletes what is older than `quarantine_retention_days`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.producers.bounces.storable import storable, storable_or_none

QUARANTINE_CAP = 64 * 1024  # bytes of one message kept
QUARANTINE_LOCK_KEY = (
    7_243_030  # pg_advisory_xact_lock: the bounds are checked and taken one message at a time
)
UNKNOWN_CLIENT = "unknown"

LIST = """
SELECT id, received_at, reason, envelope_recipient, client, raw_size, length(raw) AS kept
FROM mailroom.bounce_quarantine
ORDER BY id DESC
LIMIT %s
"""

RAW = "SELECT raw FROM mailroom.bounce_quarantine WHERE id = %s"

SEEN = "SELECT EXISTS (SELECT 1 FROM mailroom.bounce_quarantine WHERE digest = %s)"

# What the quarantine holds (kept bytes and text fields), kept by triggers in one row: the bound is
# checked for every message without a sum over every message kept.
TOTAL = "SELECT bytes FROM mailroom.bounce_quarantine_size"

CLIENT_TODAY = """
SELECT coalesce((SELECT kept FROM mailroom.bounce_quarantine_clients
                 WHERE client = %s AND day = (now() AT TIME ZONE 'UTC')::date), 0)
"""

INSERT = """
INSERT INTO mailroom.bounce_quarantine (reason, envelope_recipient, client, raw, raw_size, digest)
VALUES (%(reason)s, %(envelope)s, %(client)s, %(raw)s, %(size)s, %(digest)s)
"""

COUNT = """
INSERT INTO mailroom.bounce_quarantine_clients (client, day, kept, dropped)
VALUES (%(client)s, (now() AT TIME ZONE 'UTC')::date, %(kept)s, %(dropped)s)
ON CONFLICT (client, day) DO UPDATE
SET kept = mailroom.bounce_quarantine_clients.kept + EXCLUDED.kept,
    dropped = mailroom.bounce_quarantine_clients.dropped + EXCLUDED.dropped
"""


@dataclass(frozen=True)
class Limits:
    """The quarantine's bounds: total bytes, and messages kept per client per UTC day."""

    max_bytes: int
    client_daily_max: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """The bounds `MAILROOM_QUARANTINE_MAX_BYTES` and `MAILROOM_QUARANTINE_CLIENT_DAILY_MAX` set."""
        return cls(settings.quarantine_max_bytes, settings.quarantine_client_daily_max)


@dataclass(frozen=True)
class Kept:
    """What became of one message sent to the quarantine, and the reason as stored (or as it would be)."""

    verdict: Literal["kept", "seen before", "dropped"]
    reason: str


def keep(
    conn: psycopg.Connection[Any],
    raw: bytes,
    reason: str,
    envelope_recipient: str | None,
    *,
    client: str | None = None,
    limits: Limits | None = None,
) -> Kept:
    """Store the message once, cut to `QUARANTINE_CAP`, unless its client or the quarantine is over a bound."""
    if limits is None:
        limits = Limits.from_settings(Settings.from_env())
    if len(raw) > QUARANTINE_CAP:
        reason = f"{reason[:400]} (kept the first {QUARANTINE_CAP} of {len(raw)} bytes)"
    reason = storable(reason, 500)
    who = storable(client or UNKNOWN_CLIENT, 200)
    digest = hashlib.sha256(raw).digest()
    kept_raw = raw[:QUARANTINE_CAP]
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (QUARANTINE_LOCK_KEY,))
        if _scalar(conn, SEEN, (digest,)):
            return Kept("seen before", reason)
        if int(_scalar(conn, CLIENT_TODAY, (who,))) >= limits.client_daily_max:
            return _drop(conn, who, f"{who} kept {limits.client_daily_max} messages today (its daily limit)")
        size = (
            len(kept_raw)
            + len(reason.encode())
            + len(who.encode())
            + len((envelope_recipient or "").encode())
        )
        if int(_scalar(conn, TOTAL, ())) + size > limits.max_bytes:
            return _drop(conn, who, f"the quarantine is full ({limits.max_bytes} bytes)")
        conn.execute(
            INSERT,
            {
                "reason": reason,
                "envelope": storable_or_none(envelope_recipient, 320),
                "client": storable_or_none(client, 200),
                "raw": kept_raw,
                "size": len(raw),
                "digest": digest,
            },
        )
        conn.execute(COUNT, {"client": who, "kept": 1, "dropped": 0})
    return Kept("kept", reason)


def _drop(conn: psycopg.Connection[Any], who: str, why: str) -> Kept:
    conn.execute(COUNT, {"client": who, "kept": 0, "dropped": 1})
    return Kept("dropped", f"not kept: {why}")


def _scalar(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...]) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0] if isinstance(row, tuple) else next(iter(row.values()))


def list_quarantine(conn: psycopg.Connection[Any], limit: int) -> list[dict[str, Any]]:
    """The newest quarantined messages, without their bytes."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(LIST, (limit,)).fetchall()


def quarantined_message(conn: psycopg.Connection[Any], quarantine_id: int) -> bytes | None:
    """The kept bytes (at most `QUARANTINE_CAP`) of one quarantined message, or None if there is no such row."""
    row = conn.execute(RAW, (quarantine_id,)).fetchone()
    if row is None:
        return None
    return bytes(row[0] if isinstance(row, tuple) else row["raw"])
