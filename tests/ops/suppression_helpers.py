"""Helpers shared by the suppression tests: list state read straight from the tables, and a listing."""

from __future__ import annotations

from typing import Any

import psycopg


def listed(db_url: str) -> dict[str, str]:
    """Every suppressed address with its kind, both lists together."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT address, kind FROM mailroom.suppressions ORDER BY 1, 2").fetchall()
    return {str(a): str(k) for a, k in rows}


def events(db_url: str, address: str) -> list[tuple[Any, ...]]:
    """An address's history, oldest first: (change, kind, source, reason, actor)."""
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT change, kind, source, reason, actor FROM mailroom.suppression_events"
            " WHERE address = %s ORDER BY id",
            (address,),
        ).fetchall()


def list_bounce(
    db_url: str, address: str, kind: str = "hard", reason: str = "550 5.1.1 User unknown"
) -> None:
    """Put an address on the bounce list as the worker does after a refusal (no report, no operator)."""
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.bounce_list (email, bounce_type, reason, smtp_code, enhanced_code)"
            " VALUES (%s, %s, %s, 550, '5.1.1')",
            (address, kind, reason),
        )


def audit_rows(db_url: str, action_prefix: str) -> list[tuple[Any, ...]]:
    """(action, actor, target, detail) of the audit rows whose action starts with the prefix, oldest first."""
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT action, actor, target, detail FROM mailroom.audit_log WHERE starts_with(action, %s) ORDER BY id",
            (action_prefix,),
        ).fetchall()
