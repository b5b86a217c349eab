"""Sender-account test helpers: one account's row and the audit rows of an action, read after a rollback."""

from __future__ import annotations

from typing import Any

import psycopg


def sender(conn: psycopg.Connection[Any], name: str = "relay") -> dict[str, Any]:
    """The sender account's row as committed now."""
    conn.rollback()
    row = conn.execute("SELECT * FROM mailroom.sender_accounts WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return dict(row)


def audit_rows(conn: psycopg.Connection[Any], action: str) -> list[dict[str, Any]]:
    """Target and detail of every audit row of `action`, oldest first."""
    conn.rollback()
    return conn.execute(
        "SELECT target, detail FROM mailroom.audit_log WHERE action = %s ORDER BY id", (action,)
    ).fetchall()
