"""What an attacker with superuser rights does to the signature tables, for tests of what verification reports."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

DISABLE = "ALTER TABLE mailroom.signatures DISABLE TRIGGER USER"
ENABLE = "ALTER TABLE mailroom.signatures ENABLE TRIGGER USER"


@contextmanager
def triggers_disabled(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Switch every trigger of mailroom.signatures off (append-only and chain head alike), then on again.

    The chain head is left as it was: only the signatures change, as when a superuser edits them by hand.
    """
    conn.execute(DISABLE)
    try:
        yield
    finally:
        conn.execute(ENABLE)


REWRITE_HEAD = """
UPDATE mailroom.signature_heads h
SET count = coalesce(t.seq, 0), last_hash = mailroom.signature_link_hash(t.payload_hash, t.signature)
FROM (SELECT %(doc_id)s AS doc_id) d
LEFT JOIN LATERAL (
    SELECT seq, payload_hash, signature FROM mailroom.signatures s
    WHERE s.doc_id = d.doc_id ORDER BY seq DESC LIMIT 1
) t ON true
WHERE h.doc_id = d.doc_id
"""


def delete_signatures(conn: psycopg.Connection[Any], doc_id: str, positions: list[int]) -> None:
    """Delete the signatures at `positions` of a document behind the triggers' back, leaving its head as it was."""
    with triggers_disabled(conn):
        conn.execute(
            "DELETE FROM mailroom.signatures WHERE doc_id = %s AND seq = ANY(%s)", (doc_id, positions)
        )
    conn.commit()


def rewrite_head(conn: psycopg.Connection[Any], doc_id: str) -> None:
    """Make the head table agree with the rows left, as a thorough attacker would after deleting some."""
    conn.execute("ALTER TABLE mailroom.signature_heads DISABLE TRIGGER USER")
    conn.execute(REWRITE_HEAD, {"doc_id": doc_id})
    conn.execute("ALTER TABLE mailroom.signature_heads ENABLE TRIGGER USER")
    conn.commit()
