"""The renderer: email enqueued from SQL with a template (`mailroom.enqueue(template => ...)`) is stored
`unrendered`; this producer renders it with the same catalog and sandbox as the Python API, stores
the content that will be sent and makes it `pending` -- or `failed` with the template's error."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.core.outbox import load_catalog_async, render_stored
from worker.core.validation import ValidationError
from worker.engine.producer import Producer

log = logging.getLogger("mailroom.worker")

BATCH = 200

SELECT_UNRENDERED = """
SELECT id, template, locale, template_data, nullif(subject, '') AS subject, text_body, html_body
FROM mailroom.email_queue WHERE status = 'unrendered'
ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
"""
RENDERED = """
UPDATE mailroom.email_queue
SET subject = %(subject)s, text_body = %(text)s, html_body = %(html)s, locale = %(locale)s, status = 'pending'
WHERE id = %(id)s
"""
FAILED = "UPDATE mailroom.email_queue SET status = 'failed', last_error = %(reason)s WHERE id = %(id)s"


async def render_once(conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
    """Render one batch of unrendered email in one transaction; how many were handled."""
    async with conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SELECT_UNRENDERED, (BATCH,))
            rows = await cur.fetchall()
        if not rows:
            return 0
        catalog = await load_catalog_async(conn, settings)
        for row in rows:
            await _render_one(conn, catalog, row, settings)
    return len(rows)


async def _render_one(
    conn: psycopg.AsyncConnection[Any], catalog: Any, row: dict[str, Any], settings: Settings
) -> None:
    given = (row["subject"], row["text_body"], row["html_body"])
    try:
        subject, text, html, locale = render_stored(
            catalog, row["template"], row["locale"], row["template_data"], given, settings
        )
        async with conn.transaction():  # a savepoint: the database's rules may still refuse the content
            await conn.execute(
                RENDERED, {"id": row["id"], "subject": subject, "text": text, "html": html, "locale": locale}
            )
    except (ValidationError, psycopg.errors.CheckViolation) as exc:
        reason = f"cannot render template {row['template']!r}: {exc}".splitlines()[0][:1000]
        log.warning("email %s: %s", row["id"], reason)
        await conn.execute(FAILED, {"id": row["id"], "reason": reason})


PRODUCER = Producer("renderer", render_once, channels=("mailroom_queue",), interval_seconds=30.0)
