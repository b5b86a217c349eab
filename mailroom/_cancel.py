"""An application cancels its own email, named by its id or its idempotency key (`mailroom.cancel_my_email`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import tuple_row

from mailroom._connections import psycopg_async_connection, psycopg_connection

if TYPE_CHECKING:  # SQLAlchemy is imported only by an application that uses it
    import sqlalchemy
    import sqlalchemy.ext.asyncio
    import sqlalchemy.orm

CANCEL = "SELECT id, status, cancelled FROM mailroom.cancel_my_email(%s, %s)"


@dataclass(frozen=True)
class Cancelled:
    """What `cancel` found: the email's id, its status now, and whether this call cancelled it.

    `cancelled` is False when the email was past cancelling: being sent (`assigned`), sent, failed,
    suppressed or cancelled already; `status` says which."""

    id: int
    status: str
    cancelled: bool


Cancelled.__module__ = "mailroom"  # shown, and pickled, under its public name


def cancel(
    conn: psycopg.Connection[Any]
    | sqlalchemy.Connection
    | sqlalchemy.orm.Session
    | sqlalchemy.orm.scoped_session[Any],
    email_id: int | None = None,
    *,
    idempotency_key: str | None = None,
) -> Cancelled | None:
    """Cancel an email your database role enqueued, by its id or its idempotency key (one of the two),
    in the caller's transaction on `conn` (what `enqueue` takes).

    Pending email (and email a template or campaign dress is still to be applied to) is cancelled and
    never sent. Email the worker has claimed is not: it may be on the wire already, and `status` says
    `assigned`. Returns None when your role enqueued no such email: another role's email is never
    found, nor cancelled. SQL equivalent: `SELECT * FROM mailroom.cancel_my_email(email_id => ...)`.
    """
    pg = psycopg_connection(conn, "mailroom.cancel")
    with pg.cursor(row_factory=tuple_row) as cur:
        cur.execute(CANCEL, _named(email_id, idempotency_key))
        return _answer(cur.fetchone())


async def cancel_async(
    conn: psycopg.AsyncConnection[Any]
    | sqlalchemy.ext.asyncio.AsyncConnection
    | sqlalchemy.ext.asyncio.AsyncSession
    | sqlalchemy.ext.asyncio.async_scoped_session[Any],
    email_id: int | None = None,
    *,
    idempotency_key: str | None = None,
) -> Cancelled | None:
    """Async twin of `cancel`."""
    pg = await psycopg_async_connection(conn, "mailroom.cancel_async")
    async with pg.cursor(row_factory=tuple_row) as cur:
        await cur.execute(CANCEL, _named(email_id, idempotency_key))
        return _answer(await cur.fetchone())


def _named(email_id: int | None, idempotency_key: str | None) -> tuple[int | None, str | None]:
    if (email_id is None) == (idempotency_key is None):
        raise TypeError("cancel: give the email's id or its idempotency_key, one of the two")
    return email_id, idempotency_key


def _answer(row: tuple[Any, ...] | None) -> Cancelled | None:
    return None if row is None else Cancelled(int(row[0]), str(row[1]), bool(row[2]))
