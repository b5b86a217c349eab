"""Enqueue one email or many, inside the caller's psycopg transaction (synchronous and async).

Each call is a thin way to `worker.core.outbox`, the one home of enqueue's rules (content, campaign
policy, tracking, suppression verdict, idempotency), adding the caller's transaction and trace span.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import Any

import psycopg

from mailroom._request import EmailRequest
from worker.core import outbox
from worker.core.enqueue_trace import traced, traced_async
from worker.core.enqueued import Enqueued


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
    with _atomic(conn), traced(conn):
        return outbox.enqueue_many(conn, requests)


async def enqueue_async(conn: psycopg.AsyncConnection[Any], request: EmailRequest) -> Enqueued:
    """Async twin of `enqueue`, for applications on `psycopg.AsyncConnection`."""
    async with _atomic_async(conn), traced_async(conn):
        return await outbox.enqueue_async(conn, request)


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any], requests: Iterable[EmailRequest]
) -> list[Enqueued]:
    """Async twin of `enqueue_many`, for applications on `psycopg.AsyncConnection`."""
    async with _atomic_async(conn), traced_async(conn):
        return await outbox.enqueue_many_async(conn, requests)


def _atomic(conn: psycopg.Connection[Any]) -> AbstractContextManager[object]:
    # Inside the caller's transaction nothing is opened (a `transaction()` block on an idle
    # connection would commit on its own); on an autocommit connection the call is one transaction.
    return conn.transaction() if conn.autocommit else nullcontext()


def _atomic_async(conn: psycopg.AsyncConnection[Any]) -> AbstractAsyncContextManager[object]:
    return conn.transaction() if conn.autocommit else nullcontext()
