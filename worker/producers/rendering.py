"""The renderer: email enqueued from SQL with a template (`mailroom.enqueue(template => ...)`), or with
campaign dress (`campaign_id`, `transactional => false`, `track => true`), is stored `unrendered`; this
producer finishes it with the same code as the Python API (`worker.core.email_rows`: the catalog and
sandbox, link rewriting, the unsubscribe link and headers, the campaign's policy), stores the content that
will be sent and makes it `pending` -- or `failed` with the reason, for an operator to fix and retry."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from worker.core.campaign_mail import NO_CAMPAIGNS, POLICIES, CampaignBook, book_from_policies
from worker.core.config import Settings
from worker.engine.producer import Producer

# Rendering (templates, links, content rules) is loaded with the first unrendered email: a round that
# finds none, what most rounds find, starts without it.
if TYPE_CHECKING:
    from worker.core.templates import TemplateCatalog

log = logging.getLogger("mailroom.worker")

BATCH = 200

SELECT_UNRENDERED = """
SELECT id, template, locale, template_data, nullif(subject, '') AS subject, text_body, html_body, dress,
       recipient_email, to_extra, cc, bcc, reply_to, recipient_name, headers, priority, scheduled_for,
       max_retries, idempotency_key, campaign_id, transactional, reference_type, reference_id
FROM mailroom.email_queue WHERE status = 'unrendered'
ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
"""
RENDERED = """
UPDATE mailroom.email_queue
SET subject = %(subject)s, text_body = %(text)s, html_body = %(html)s, locale = %(locale)s, status = 'pending'
WHERE id = %(id)s
"""
# What dress changes, from the row `prepare` made (its columns by name), and the email's tracked links.
DRESSED = """
UPDATE mailroom.email_queue
SET subject = %(subject)s, text_body = %(text_body)s, html_body = %(html_body)s, locale = %(locale)s,
    headers = %(headers)s::jsonb, tracking_token = %(tracking_token)s, unsubscribe_token = %(unsubscribe_token)s,
    track_opens = %(track_opens)s, track_clicks = %(track_clicks)s, dress = NULL, status = 'pending'
WHERE id = %(id)s
"""
DRESSED_LINKS = "INSERT INTO mailroom.tracked_links (token, email_id, position, url) VALUES (%s, %s, %s, %s)"
FAILED = "UPDATE mailroom.email_queue SET status = 'failed', last_error = %(reason)s WHERE id = %(id)s"


async def render_once(conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
    """Render (and dress) one batch of unrendered email in one transaction; how many were handled."""
    async with conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SELECT_UNRENDERED, (BATCH,))
            rows = await cur.fetchall()
        if not rows:
            return 0
        from worker.core.outbox import load_catalog_async

        catalog = await load_catalog_async(conn, settings)
        book = await _book(conn, rows)
        for row in rows:
            await _render_one(conn, catalog, book, row, settings)
    return len(rows)


async def _book(conn: psycopg.AsyncConnection[Any], rows: list[dict[str, Any]]) -> CampaignBook:
    """The policy of the campaigns whose email waits for its dress (none asked: no statement)."""
    campaigns = sorted(
        {row["campaign_id"] for row in rows if row["dress"] is not None and row["campaign_id"]}
    )
    if not campaigns:
        return NO_CAMPAIGNS
    async with conn.cursor() as cur:
        await cur.execute(POLICIES, (campaigns,))
        return book_from_policies(await cur.fetchall())


async def _render_one(
    conn: psycopg.AsyncConnection[Any],
    catalog: TemplateCatalog,
    book: CampaignBook,
    row: dict[str, Any],
    settings: Settings,
) -> None:
    from worker.core.outbox import render_stored

    given = (row["subject"], row["text_body"], row["html_body"])
    try:
        async with conn.transaction():  # a savepoint: the database's rules may still refuse the content
            if row["dress"] is not None:
                await _dress(conn, catalog, book, row, settings)
                return
            subject, text, html, locale = render_stored(
                catalog, row["template"], row["locale"], row["template_data"], given, settings
            )
            await conn.execute(
                RENDERED, {"id": row["id"], "subject": subject, "text": text, "html": html, "locale": locale}
            )
    except psycopg.OperationalError:
        raise  # the database is gone: the batch is tried again, nothing is the email's fault
    except Exception as exc:
        # Whatever this one email's content or settings make fail (a refused rule, a malformed setting,
        # a token clash) fails this email with the reason, never the batch: a batch rolled back would
        # come first again, and every unrendered email would wait behind it for ever.
        what = f"template {row['template']!r}" if row["template"] else "its campaign dress"
        reason = f"cannot render {what}: {exc}".splitlines()[0][:1000]
        log.warning("email %s: %s", row["id"], reason)
        await conn.execute(FAILED, {"id": row["id"], "reason": reason})


async def _dress(
    conn: psycopg.AsyncConnection[Any],
    catalog: TemplateCatalog,
    book: CampaignBook,
    row: dict[str, Any],
    settings: Settings,
) -> None:
    """Finish an email enqueued from SQL with campaign dress as the Python API would have at enqueue:
    the request it stands for goes through `prepare`, and what that adds is stored."""
    from worker.core.email_rows import COLUMNS, LINKS, EmailRequest, prepare

    request = EmailRequest(
        to=[row["recipient_email"], *(row["to_extra"] or ())],
        subject=row["subject"],
        text=row["text_body"],
        html=row["html_body"],
        to_name=row["recipient_name"],
        template=row["template"],
        locale=row["locale"],
        data=row["template_data"],
        priority=row["priority"],
        scheduled_for=row["scheduled_for"],
        idempotency_key=row["idempotency_key"],
        campaign_id=row["campaign_id"],
        headers=row["headers"],
        max_retries=row["max_retries"],
        transactional=row["transactional"],
        reference_type=row["reference_type"],
        reference_id=row["reference_id"],
        track=row["dress"].get("track"),
        cc=row["cc"],
        bcc=row["bcc"],
        reply_to=row["reply_to"],
    )
    prepared = prepare(request, catalog, settings, None, book)
    values = dict(zip(COLUMNS, prepared, strict=False))
    await conn.execute(DRESSED, {**values, "id": row["id"]})
    for position, (token, url) in enumerate(prepared[LINKS]):
        await conn.execute(DRESSED_LINKS, (token, row["id"], position, url))


PRODUCER = Producer("renderer", render_once, channels=("mailroom_queue",), interval_seconds=30.0)
