"""Reading the bounce quarantine: what the intake kept because it could not read or trust it."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

LIST = """
SELECT id, received_at, reason, envelope_recipient, raw_size, length(raw) AS kept
FROM mailroom.bounce_quarantine
ORDER BY id DESC
LIMIT %s
"""

RAW = "SELECT raw FROM mailroom.bounce_quarantine WHERE id = %s"


def list_quarantine(conn: psycopg.Connection[Any], limit: int) -> list[dict[str, Any]]:
    """The newest quarantined messages, without their bytes."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(LIST, (limit,)).fetchall()


def quarantined_message(conn: psycopg.Connection[Any], quarantine_id: int) -> bytes | None:
    """The kept bytes (at most 256 KiB) of one quarantined message, or None if there is no such row."""
    row = conn.execute(RAW, (quarantine_id,)).fetchone()
    if row is None:
        return None
    return bytes(row[0] if isinstance(row, tuple) else row["raw"])
