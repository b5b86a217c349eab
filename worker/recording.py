"""Group commit of accepted email into the sent journal: one statement for what every slot sent meanwhile.

A slot never sends its next message before the previous one is committed (that bounds what a
killed worker sends twice to one message per connection), so with one statement per email the
database, not SMTP, would set the pace. Each slot hands its accepted email to the recorder and
waits; the recorder writes everything handed in meanwhile with one statement and one commit into
`mailroom.sent_journal`, a narrow table that is cheap to write (the slot applies its batch's rows
to the queue in one statement at the end of the batch; see `worker.queue.APPLY_SENT`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from worker import queue as q

log = logging.getLogger("mailroom.worker")


@dataclass(frozen=True)
class Sent:
    """One email the SMTP server accepted, under the claim (lease token) it was sent with."""

    email_id: int
    token: uuid.UUID
    sender_id: int
    code: int | None
    enhanced: str | None
    response: str
    duration_ms: int
    message_id: str | None


class SentRecorder:
    """Collects accepted emails from every slot and journals them together; `run` is the writing task."""

    def __init__(
        self,
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]],
        owner: str,
        retry_seconds: float,
    ) -> None:
        self.pool = pool
        self.owner = owner
        self.retry_seconds = retry_seconds
        self._pending: list[tuple[Sent, asyncio.Future[bool]]] = []
        self._wake = asyncio.Event()
        self.statements = 0  # how many group commits were written (for tests and logs)

    async def record(self, sent: Sent) -> bool:
        """Wait until this email is journalled as sent; False if its claim's lease was lost meanwhile."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((sent, future))
        self._wake.set()
        return await future

    async def run(self) -> None:
        """Write whatever is waiting, one statement at a time, until cancelled."""
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                batch, self._pending = self._pending, []
                if not batch:
                    continue
                try:
                    conn, held = await self._write(conn, [sent for sent, _ in batch])
                except Exception as exc:  # every waiting slot sees the failure and releases its claim
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for sent, future in batch:
                    if not future.done():
                        future.set_result(sent.email_id in held)
        finally:
            for _, future in self._pending:
                future.cancel()
            if conn is not None:
                await self.pool.putconn(conn)

    async def _write(
        self, conn: psycopg.AsyncConnection[Any] | None, batch: list[Sent]
    ) -> tuple[psycopg.AsyncConnection[Any] | None, set[int]]:
        """Commit the batch, retrying a lost connection for a while; the connection is kept for next time."""
        # One JSON parameter rather than eight arrays: psycopg's array dumping costs more than the insert.
        params = {
            "sent": json.dumps(
                [
                    {
                        "id": s.email_id,
                        "token": str(s.token),
                        "sender": s.sender_id,
                        "code": s.code,
                        "enhanced": s.enhanced,
                        "response": s.response,
                        "duration_ms": s.duration_ms,
                        "message_id": s.message_id,
                    }
                    for s in batch
                ]
            ),
            "owner": self.owner,
        }
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                if conn is None:
                    conn = await self.pool.getconn()
                cur = await conn.execute(q.JOURNAL_SENT, params)
                held = {int(row[0]) for row in await cur.fetchall()}
                self.statements += 1
                return conn, held
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if conn is not None:
                    await self.pool.putconn(conn)  # the pool discards a broken connection
                    conn = None
                if time.monotonic() > deadline:
                    raise
                log.warning("recording %d sent email(s) failed (%s); retrying", len(batch), exc)
                await asyncio.sleep(0.5)
