"""An enqueue as a span of the caller's trace, whose context (and an event's correlation id) the email keeps.

The queue's `traceparent`, `tracestate` and `correlation_id` columns default to the transaction's
`mailroom.*` settings of the same names (migration 0010/70), so the statements that write email stay
as they are: inside a trace, the settings are set before the enqueue and cleared after it (two round
trips, only then); outside one, nothing is sent at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from worker.core import tracing

SET = (
    "SELECT set_config('mailroom.traceparent', %s, true), set_config('mailroom.tracestate', %s, true),"
    " set_config('mailroom.correlation_id', %s, true)"
)
_CLEAR = ("", "", "")


def _settings(correlation_id: str | None) -> tuple[str, str, str] | None:
    """The three settings' values for the current span, or None when there is nothing to store."""
    context = tracing.current_context()
    if context is None and correlation_id is None:
        return None
    traceparent, tracestate = context or ("", None)
    return traceparent, tracestate or "", correlation_id or ""


def _attributes(correlation_id: str | None) -> tracing.Attributes:
    return {} if correlation_id is None else {"mailroom.correlation_id": correlation_id}


def _usable(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    # After a failed statement the transaction refuses everything until it is rolled back, which
    # restores the settings anyway.
    return conn.info.transaction_status is not TransactionStatus.INERROR


@contextmanager
def _enqueue_span(correlation_id: str | None) -> Iterator[tuple[Any, tuple[str, str, str] | None]]:
    """The span `mailroom.enqueue` and the settings to set in it; (None, None) outside a trace.

    What `traced` and `traced_async` decide, written once: they differ only in awaiting the statements."""
    if not tracing.active() and correlation_id is None:
        yield None, None
        return
    with tracing.span("mailroom.enqueue", _attributes(correlation_id), kind="producer") as span:
        yield span, _settings(correlation_id)


@contextmanager
def traced(conn: psycopg.Connection[Any], correlation_id: str | None = None) -> Iterator[Any]:
    """Enqueue in the block as the span `mailroom.enqueue`; the emails written in it keep its context."""
    with _enqueue_span(correlation_id) as (span, values):
        if values is not None:
            conn.execute(SET, values)
        try:
            yield span
        finally:
            if values is not None and _usable(conn):
                conn.execute(SET, _CLEAR)


@asynccontextmanager
async def traced_async(
    conn: psycopg.AsyncConnection[Any], correlation_id: str | None = None
) -> AsyncIterator[Any]:
    """Async twin of `traced`."""
    with _enqueue_span(correlation_id) as (span, values):
        if values is not None:
            await conn.execute(SET, values)
        try:
            yield span
        finally:
            if values is not None and _usable(conn):
                await conn.execute(SET, _CLEAR)
