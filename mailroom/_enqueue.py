"""Enqueue one email or many, inside the caller's transaction (synchronous and async).

The caller passes a psycopg connection, or a SQLAlchemy connection or session on the psycopg dialect,
whose transaction's psycopg connection `mailroom._connections` finds. Each call is a thin way to
`worker.core.outbox`, the one home of enqueue's rules (content, campaign policy, tracking, suppression
verdict, idempotency), adding the caller's transaction and trace span.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import psycopg

from mailroom._connections import psycopg_async_connection, psycopg_connection
from mailroom._request import EmailRequest
from worker.core import outbox
from worker.core.enqueue_trace import traced, traced_async
from worker.core.enqueued import Enqueued

if TYPE_CHECKING:  # SQLAlchemy is imported only by an application that uses it
    import sqlalchemy
    import sqlalchemy.ext.asyncio
    import sqlalchemy.orm


def enqueue(
    conn: psycopg.Connection[Any]
    | sqlalchemy.Connection
    | sqlalchemy.orm.Session
    | sqlalchemy.orm.scoped_session[Any],
    request: EmailRequest,
) -> Enqueued:
    """Enqueue one email in the caller's transaction on `conn` and return its id.

    `conn` is a psycopg `Connection`, or a SQLAlchemy `Connection` or `Session` (a `scoped_session`
    too) on the psycopg 3 dialect (`postgresql+psycopg://`): the email is written on the psycopg
    connection under it, in its transaction (a `Session` without one begins it). Anything else,
    an async connection included, raises `TypeError`.

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
    pg = psycopg_connection(conn, "mailroom.enqueue")
    with _atomic(pg), traced(pg):
        return outbox.enqueue(pg, request)


def enqueue_many(
    conn: psycopg.Connection[Any]
    | sqlalchemy.Connection
    | sqlalchemy.orm.Session
    | sqlalchemy.orm.scoped_session[Any],
    requests: Iterable[EmailRequest],
) -> list[Enqueued]:
    """Enqueue several emails in the caller's transaction on `conn`; their ids, in the requests' order.

    Each id is an `Enqueued`, as `enqueue` returns: `.suppressed` tells the emails stored suppressed.

    Every request is checked (and rendered) before any is written: one refused request raises
    `BatchValidationError` (a `ValidationError` with the request's `index`) and writes nothing.
    The emails are then written in one round trip and, as with `enqueue`, exist exactly when the
    caller's transaction commits. A request repeating an `idempotency_key` (stored earlier, or
    earlier in the same call) gets the first email's id. Raises as `enqueue` does otherwise.

    `conn` is what `enqueue` takes. SQL equivalent: one `SELECT mailroom.enqueue(...)` per email, in one
    transaction.
    """
    pg = psycopg_connection(conn, "mailroom.enqueue_many")
    with _atomic(pg), traced(pg):
        return outbox.enqueue_many(pg, requests)


async def enqueue_async(
    conn: psycopg.AsyncConnection[Any]
    | sqlalchemy.ext.asyncio.AsyncConnection
    | sqlalchemy.ext.asyncio.AsyncSession
    | sqlalchemy.ext.asyncio.async_scoped_session[Any],
    request: EmailRequest,
) -> Enqueued:
    """Async twin of `enqueue`, on a psycopg or SQLAlchemy `AsyncConnection`, or an `AsyncSession`.

    SQLAlchemy's must be on the psycopg 3 dialect (`create_async_engine("postgresql+psycopg://...")`);
    a synchronous connection or session raises `TypeError`.
    """
    pg = await psycopg_async_connection(conn, "mailroom.enqueue_async")
    async with _atomic_async(pg), traced_async(pg):
        return await outbox.enqueue_async(pg, request)


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any]
    | sqlalchemy.ext.asyncio.AsyncConnection
    | sqlalchemy.ext.asyncio.AsyncSession
    | sqlalchemy.ext.asyncio.async_scoped_session[Any],
    requests: Iterable[EmailRequest],
) -> list[Enqueued]:
    """Async twin of `enqueue_many`, on what `enqueue_async` takes."""
    pg = await psycopg_async_connection(conn, "mailroom.enqueue_many_async")
    async with _atomic_async(pg), traced_async(pg):
        return await outbox.enqueue_many_async(pg, requests)


def _atomic(conn: psycopg.Connection[Any]) -> AbstractContextManager[object]:
    # Inside the caller's transaction nothing is opened (a `transaction()` block on an idle
    # connection would commit on its own); on an autocommit connection the call is one transaction.
    return conn.transaction() if conn.autocommit else nullcontext()


def _atomic_async(conn: psycopg.AsyncConnection[Any]) -> AbstractAsyncContextManager[object]:
    return conn.transaction() if conn.autocommit else nullcontext()
