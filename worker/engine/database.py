"""The engine's PostgreSQL sessions: how its connections are set up, held across statements, and asked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from worker.core.failover import Pool

__all__ = ["Borrowed", "Params", "Pool", "fetch_row", "fetch_scalar"]

Params = Sequence[Any] | dict[str, Any]

# Every connection commits as the server's `synchronous_commit` says (claims, quota, failures,
# circuits, and the sent journal too, unless MAILROOM_JOURNAL_DURABLE is false): what the relay
# accepted is on a synchronous standby before the slot sends its next message, so a failover never
# makes the lease rescue send it again (`worker.core.db.connection_kwargs`).


class Borrowed:
    """A pool connection held across several statements, swapped for a fresh one after a failure."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def get(self) -> psycopg.AsyncConnection[Any]:
        """The held connection, borrowing one first if needed."""
        if self.conn is None:
            self.conn = await self.pool.getconn()
        return self.conn

    async def give_back(self) -> None:
        """Return the connection; the pool discards it if it is broken."""
        conn, self.conn = self.conn, None
        if conn is not None:
            await self.pool.putconn(conn)

    async def discard(self) -> None:
        """Give the connection back closed, after it met an unavailable database (a read-only server's
        connection looks healthy to the pool, which would lend it again)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            await conn.close()
            await self.pool.putconn(conn)


async def fetch_row(pool: Pool, statement: str, params: Params = ()) -> tuple[Any, ...]:
    """The one row a statement returns."""
    async with pool.connection() as conn:
        cur = await conn.execute(statement, params)
        row = await cur.fetchone()
    assert row is not None
    return tuple(row)


async def fetch_scalar(pool: Pool, statement: str, params: Params = ()) -> Any:
    """The first column of the first row a statement returns, or None."""
    async with pool.connection() as conn:
        cur = await conn.execute(statement, params)
        row = await cur.fetchone()
    return row[0] if row else None
