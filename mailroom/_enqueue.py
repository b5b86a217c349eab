"""Enqueue one email or many, inside the caller's psycopg transaction (synchronous and async)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from mailroom._errors import BatchValidationError
from mailroom._request import EmailRequest
from worker.core import outbox
from worker.core.config import Settings
from worker.core.enqueue_trace import traced, traced_async
from worker.core.enqueued import Enqueued, from_row
from worker.core.templates import TemplateCatalog
from worker.core.validation import ValidationError

# One prepared row: the queue's columns (`outbox.COLUMNS`), then the email's tracked links.
_Row = tuple[Any, ...]


def enqueue(conn: psycopg.Connection[Any], request: EmailRequest) -> Enqueued:
    """Enqueue one email in the caller's transaction on `conn` and return its id.

    The id is an `Enqueued`, an `int` that also says whether the email will be sent: when every
    recipient is on the suppression list it is stored `suppressed` at once, `.suppressed` is True
    and `.suppression_reason` says so: why (`on the bounce list (hard)`, `unsubscribed`, ...) to a
    role that may read the suppression list, only that the address is on it to any other.

    The email is written with the caller's connection and is not committed here: it exists
    exactly when the caller's transaction commits, and vanishes if it rolls back (on an
    autocommit connection, the call is its own transaction). Content is checked, and a
    template rendered, before anything is written; limits come from the `MAILROOM_*`
    environment variables the worker reads. The same `idempotency_key` again from the same
    database role returns the first email's id and stores nothing new.

    Raises `ValidationError` (a field refused, nothing written), `ConfigError` (a malformed
    `MAILROOM_*` variable) and `psycopg.Error` from the database (for example
    `psycopg.errors.UndefinedTable` when Mailroom's schema is not installed).

    SQL equivalent: `SELECT mailroom.enqueue(recipients => ARRAY[...], subject => ..., ...)`.
    """
    with _atomic(conn), traced(conn):
        return outbox.enqueue(conn, request)


def enqueue_many(conn: psycopg.Connection[Any], requests: Iterable[EmailRequest]) -> list[Enqueued]:
    """Enqueue several emails in the caller's transaction on `conn`; their ids, in the requests' order.

    Each id is an `Enqueued`, as `enqueue` returns: `.suppressed` tells the emails stored suppressed.

    Every request is checked (and rendered) before any is written: one refused request raises
    `BatchValidationError` (a `ValidationError` with the request's `index`) and writes nothing.
    The emails are then written in one round trip and, as with `enqueue`, exist exactly when the
    caller's transaction commits. A request repeating an `idempotency_key` (stored earlier, or
    earlier in the same call) gets the first email's id. Raises as `enqueue` does otherwise.

    SQL equivalent: one `SELECT mailroom.enqueue(...)` per email, in one transaction.
    """
    batch = list(requests)
    if not batch:
        return []
    settings = Settings.from_env()
    catalog = outbox.load_catalog(conn, settings) if _any_template(batch) else None
    rows = _prepare_all(batch, catalog, settings)
    with _atomic(conn), traced(conn), conn.cursor(row_factory=tuple_row) as cur:
        cur.executemany(outbox.INSERT_ONE, [row[: outbox.LINKS] for row in rows], returning=True)
        inserted = [cur.fetchone()]
        while cur.nextset():
            inserted.append(cur.fetchone())
        ids: list[Enqueued] = []
        for request, got in zip(batch, inserted, strict=True):
            if got is None:  # a repeated idempotency key: the first email's id
                got = cur.execute(outbox.SELECT_BY_KEY, (request.idempotency_key,)).fetchone()
            assert got is not None
            ids.append(from_row(got))
        links = _link_params(rows, inserted)
        if links:
            cur.executemany(outbox.INSERT_LINKS, links)
    return ids


async def enqueue_async(conn: psycopg.AsyncConnection[Any], request: EmailRequest) -> Enqueued:
    """Async twin of `enqueue`, for applications on `psycopg.AsyncConnection`."""
    async with _atomic_async(conn), traced_async(conn):
        return await outbox.enqueue_async(conn, request)


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any], requests: Iterable[EmailRequest]
) -> list[Enqueued]:
    """Async twin of `enqueue_many`, for applications on `psycopg.AsyncConnection`."""
    batch = list(requests)
    if not batch:
        return []
    settings = Settings.from_env()
    catalog = await outbox.load_catalog_async(conn, settings) if _any_template(batch) else None
    rows = _prepare_all(batch, catalog, settings)
    async with _atomic_async(conn), traced_async(conn), conn.cursor(row_factory=tuple_row) as cur:
        await cur.executemany(outbox.INSERT_ONE, [row[: outbox.LINKS] for row in rows], returning=True)
        inserted = [await cur.fetchone()]
        while cur.nextset():
            inserted.append(await cur.fetchone())
        ids: list[Enqueued] = []
        for request, got in zip(batch, inserted, strict=True):
            if got is None:
                await cur.execute(outbox.SELECT_BY_KEY, (request.idempotency_key,))
                got = await cur.fetchone()
            assert got is not None
            ids.append(from_row(got))
        links = _link_params(rows, inserted)
        if links:
            await cur.executemany(outbox.INSERT_LINKS, links)
    return ids


def _atomic(conn: psycopg.Connection[Any]) -> AbstractContextManager[object]:
    # Inside the caller's transaction nothing is opened (a `transaction()` block on an idle
    # connection would commit on its own); on an autocommit connection the call is one transaction.
    return conn.transaction() if conn.autocommit else nullcontext()


def _atomic_async(conn: psycopg.AsyncConnection[Any]) -> AbstractAsyncContextManager[object]:
    return conn.transaction() if conn.autocommit else nullcontext()


def _any_template(batch: Sequence[EmailRequest]) -> bool:
    return any(request.template for request in batch)


def _prepare_all(
    batch: Sequence[EmailRequest], catalog: TemplateCatalog | None, settings: Settings
) -> list[_Row]:
    """Every request checked and rendered into its row, or the first refusal with its position."""
    rows: list[_Row] = []
    for index, request in enumerate(batch):
        try:
            rows.append(outbox.prepare(request, catalog, settings))
        except ValidationError as exc:
            raise BatchValidationError(index, exc.field, exc.message) from None
    return rows


def _link_params(rows: Sequence[_Row], inserted: Sequence[tuple[Any, ...] | None]) -> list[dict[str, Any]]:
    """Parameters of `outbox.INSERT_LINKS` for each email written with tracked links."""
    return [
        {
            "email_id": int(got[0]),
            "tokens": [token for token, _ in row[outbox.LINKS]],
            "urls": [url for _, url in row[outbox.LINKS]],
        }
        for row, got in zip(rows, inserted, strict=True)
        # A repeated idempotency key stored nothing, so its links are not stored either.
        if got is not None and row[outbox.LINKS]
    ]
