"""The engine's PostgreSQL sessions: how its connections are set up, held across statements, and asked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

Pool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]
Params = Sequence[Any] | dict[str, Any]

# The pool's connections commit durably (claims, quota, failures, circuits). The sent journal's own
# connection commits asynchronously (`worker.core.db.connection_kwargs`): a killed worker loses
# nothing (the server has every commit); only a crash of PostgreSQL itself can forget its last few
# hundred milliseconds, and those emails are then rescued as unsent and sent again -- the
# at-least-once the design accepts.


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
