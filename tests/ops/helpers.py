"""Operations test helpers: the audit trail as rows, and failed email to act on."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.worker.helpers import enqueue_many


def audit_rows(db_url: str) -> list[dict[str, Any]]:
    """Every committed audit row, oldest first (read on a connection of its own)."""
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as other:
        return other.execute("SELECT * FROM mailroom.audit_log ORDER BY id").fetchall()


def failed_emails(db_url: str, n: int) -> list[int]:
    """n emails that were claimed and failed, committed."""
    ids = enqueue_many(db_url, n)
    with psycopg.connect(db_url) as c:
        c.execute(
            "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'test',"
            " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '5 minutes'"
            " WHERE id = ANY(%s)",
            (ids,),
        )
        c.execute(
            "UPDATE mailroom.email_queue SET status = 'failed', last_error = '550 5.1.1 unknown user'"
            " WHERE id = ANY(%s)",
            (ids,),
        )
    return ids
