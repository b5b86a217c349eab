"""The audit trail: record a sensitive operation in the caller's transaction, list the latest, name the actor."""

from __future__ import annotations

import getpass
import json
import os
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

# mailroom.audit() (schema.sql) inserts the row; the database role is taken from the session there.
RECORD = "SELECT mailroom.audit(%(action)s, %(actor)s, %(target)s, %(affected)s, %(detail)s)"

# Newest first, through audit_log_at_idx. `--action sender` matches sender.add, sender.suspend, ...
# (a whole dotted prefix, compared with left(): action names may hold `_`, a LIKE wildcard). The
# console's filter is an ILIKE pattern over who, what and on what. Applications' rows waiting to be
# chained (mailroom.audit_pending, a handful) are in the trail already: the plan merges them in.
RECENT = """
SELECT id, at, db_role, actor, action, target, affected, detail
FROM (SELECT id, at, db_role, actor, action, target, affected, detail FROM mailroom.audit_log
      UNION ALL
      SELECT id, at, db_role, actor, action, target, affected, detail FROM mailroom.audit_pending) AS trail
WHERE (%(since)s::timestamptz IS NULL OR at >= %(since)s::timestamptz)
  AND (%(action)s::text IS NULL OR action = %(action)s::text
       OR left(action, length(%(action)s::text) + 1) = %(action)s::text || '.')
  AND (%(pattern)s::text IS NULL OR actor ILIKE %(pattern)s OR action ILIKE %(pattern)s
       OR target ILIKE %(pattern)s)
ORDER BY at DESC, id DESC
LIMIT %(limit)s
"""

# How many ids an audit row's detail lists; the count (`affected`) is always whole.
MAX_IDS = 100


def os_user() -> str:
    """The operating-system user running this process, or `uid:N` when it has no name."""
    try:
        name = getpass.getuser()
    except (OSError, KeyError, ImportError):
        # No LOGNAME/USER and no passwd entry (a container's arbitrary uid): still say who, by number.
        name = ""
    if name:
        return name[:100]
    getuid = getattr(os, "getuid", None)
    return f"uid:{getuid()}" if getuid is not None else "unknown"


def cli_actor() -> str:
    """Who the command line acts for: the OS user."""
    return os_user()


def console_actor() -> str:
    """Who the console acts for: `console:<os user>`."""
    return f"console:{os_user()}"


def record(
    conn: psycopg.Connection[Any],
    action: str,
    actor: str,
    target: str | None = None,
    affected: int = 0,
    detail: dict[str, Any] | None = None,
) -> int:
    """Write one audit row in `conn`'s current transaction (it commits or rolls back with the change); its id."""
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(
            RECORD,
            {
                "action": action,
                "actor": actor,
                "target": target,
                "affected": affected,
                "detail": Jsonb(detail or {}),
            },
        ).fetchone()
    assert row is not None
    return int(row[0])


def recent_params(
    limit: int, since: datetime | None = None, action: str | None = None, pattern: str | None = None
) -> dict[str, Any]:
    """The parameters of RECENT (the console runs it on its own asynchronous connection)."""
    return {"limit": limit, "since": since, "action": action, "pattern": pattern}


def recent(
    conn: psycopg.Connection[Any],
    limit: int = 50,
    since: datetime | None = None,
    action: str | None = None,
) -> list[dict[str, Any]]:
    """The latest audit rows, newest first: at most `limit`, from `since`, of one action or dotted prefix."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(RECENT, recent_params(limit, since, action)).fetchall()


def id_detail(ids: list[int]) -> dict[str, Any]:
    """The ids an action changed, for an audit row's detail: the first MAX_IDS, and whether more were cut."""
    detail: dict[str, Any] = {"ids": ids[:MAX_IDS]}
    if len(ids) > MAX_IDS:
        detail["ids_truncated"] = True
    return detail


def describe(detail: dict[str, Any]) -> str:
    """A detail as one line of `key=value` pairs, values in JSON (plain words bare), None left out."""
    parts = []
    for key, value in detail.items():
        if value is None:
            continue
        # Bare only when it cannot be misread or reach the terminal as a control character.
        bare = isinstance(value, str) and value and all(c.isprintable() and not c.isspace() for c in value)
        text = value if bare else json.dumps(value)
        parts.append(f"{key}={text}")
    return " ".join(parts)
