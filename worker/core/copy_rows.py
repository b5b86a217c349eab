"""Bulk enqueue by COPY: rows already prepared (validated and rendered) go in through a staging table.

Ids are allocated first, so every line of a batch knows its email's id; an idempotency key that is
already stored resolves to the first email's id, like the one-at-a-time path.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from worker.core.email_rows import COLUMNS, FILES, LINKS, address_array
from worker.core.outbox import COLUMN_LIST
from worker.core.validation import ValidationError

_ID_SEQUENCE = "SELECT pg_get_serial_sequence('mailroom.email_queue', 'id')"
# The sequence comes as a parameter, looked up once: pg_get_serial_sequence in the select list runs
# per row and made each id cost ~6 µs of server time instead of ~0.5.
_ALLOCATE_IDS = "SELECT nextval(%s::regclass) FROM generate_series(1, %s)"
# CREATE TABLE AS copies no NOT NULL constraints: NULL scheduled_for is filled by the queue's insert trigger.
_STAGING = sql.SQL(
    "CREATE TEMP TABLE IF NOT EXISTS mailroom_enqueue_staging ON COMMIT DELETE ROWS"
    " AS SELECT id, {columns} FROM mailroom.email_queue WITH NO DATA"
).format(columns=COLUMN_LIST)
_FROM_STAGING = sql.SQL(
    "INSERT INTO mailroom.email_queue (id, {columns}) SELECT id, {columns}"
    " FROM mailroom_enqueue_staging ORDER BY id ON CONFLICT (enqueued_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
).format(columns=COLUMN_LIST)
_RESOLVE_KEYS = (
    "SELECT s.id AS staged, q.id FROM mailroom_enqueue_staging s"
    " JOIN mailroom.email_queue q ON q.enqueued_by = session_user AND q.idempotency_key = s.idempotency_key"
)


# One prepared email for COPY: its idempotency key (or None), its row in COPY text format without the id
# (`COPY_COLUMNS`, then scheduled_for only when it has one), its tracked links as (token, url) (empty
# unless click tracking is on), and whether it has a scheduled_for.
CopyRow = tuple[str | None, str, tuple[tuple[Any, str], ...], bool]

# COPY leaves scheduled_for out when an email has none: the column default (now(), the database's
# clock) fills it, and the queue's insert trigger, which only runs for NULL scheduled_for or a status
# other than pending, is skipped (it cost ~2.5 µs of server time per row).
_SCHEDULED = COLUMNS.index("scheduled_for")
COPY_COLUMNS = COLUMNS[:_SCHEDULED] + COLUMNS[_SCHEDULED + 1 :]

_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_KEY_INDEX = COLUMNS.index("idempotency_key")
_FROM_INDEX = COLUMNS.index("from_email")


def _copy_value(value: Any) -> str:
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, str):
        return value.translate(_COPY_ESCAPES)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return address_array(value)
    return str(value)


class _NotPlain(Exception):
    """A value `copy_row`'s whole-row path does not format; the row takes the per-value path."""


def _plain_value(value: Any) -> str:
    # Values whose text never needs a COPY escape; a str subclass or anything else is not plain.
    kind = type(value)
    if kind is int or kind is uuid.UUID:
        return str(value)
    if kind is datetime:
        stamp: str = value.isoformat()
        return stamp
    if kind is list:
        return address_array(value)
    raise _NotPlain


# Stand-ins while a row is escaped as one string: between values, and for NULL (whose `\N` must not be
# escaped). A row with a value that holds either takes the per-value path.
_SEPARATOR = "\x00"
_NULL = "\x01"


def copy_row(row: tuple[Any, ...]) -> CopyRow:
    """Format a prepared row (from `prepare`) as COPY text once, wherever it was validated. A row with
    files, or with a From of its own, is refused: COPY writes the queue alone, and the door (`write_rows`)
    stores files and asks whether a sender account may send that From."""
    if row[FILES] or row[_FROM_INDEX] is not None:
        field = "attachments" if row[FILES] else "from_email"
        raise ValidationError(
            field,
            f"the COPY load takes no {'files' if row[FILES] else 'From of its own'}: enqueue such email"
            " through the door (the Python API, or `mailroom enqueue` as a role made by `mailroom db grant app`)",
        )
    scheduled_for = row[_SCHEDULED]
    values = row[:_SCHEDULED] + row[_SCHEDULED + 1 : LINKS]
    if scheduled_for is not None:
        values += (scheduled_for,)
    try:
        # One join and five replaces for the whole row instead of a translate per value: the same
        # text as `_copy_value` gives each value, as long as no value holds a stand-in.
        text = _SEPARATOR.join(
            [
                value
                if type(value) is str
                else _NULL
                if value is None
                else "t"
                if value is True
                else "f"
                if value is False
                else _plain_value(value)
                for value in values
            ]
        )
    except _NotPlain:
        text = None
    if (
        text is not None
        and text.count(_SEPARATOR) == len(values) - 1
        and text.count(_NULL) == values.count(None)
    ):
        text = (
            text.replace("\\", "\\\\")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
            .replace("\t", "\\t")
            .replace(_SEPARATOR, "\t")
            .replace(_NULL, "\\N")
        )
    else:
        text = "\t".join([_copy_value(v) for v in values])
    return row[_KEY_INDEX], text, row[LINKS], scheduled_for is not None


_COPY_LISTS = {
    scheduled: sql.SQL(", ").join(
        sql.Identifier(c) for c in (*COPY_COLUMNS, "scheduled_for")[: len(COLUMNS) - 1 + scheduled]
    )
    for scheduled in (False, True)
}


def _copy_text(
    conn: psycopg.Connection[Any], table: sql.Composable, scheduled: bool, lines: Sequence[tuple[int, str]]
) -> None:
    statement = sql.SQL("COPY {table} (id, {columns}) FROM STDIN").format(
        table=table, columns=_COPY_LISTS[scheduled]
    )
    with conn.cursor() as cur, cur.copy(statement) as copy:
        copy.write("".join([f"{i}\t{text}\n" for i, text in lines]))


def _copy_links(
    conn: psycopg.Connection[Any], emails: Sequence[tuple[int, Sequence[tuple[Any, str]]]]
) -> None:
    statement = "COPY mailroom.tracked_links (token, email_id, position, url) FROM STDIN"
    with conn.cursor() as cur, cur.copy(statement) as copy:
        for email_id, links in emails:
            for position, (token, url) in enumerate(links):
                copy.write_row((token, email_id, position, url))


def _no_wait() -> None:
    pass


def insert_copy_rows(
    conn: psycopg.Connection[Any],
    rows: Sequence[CopyRow],
    *,
    ids_turn: AbstractContextManager[object] | None = None,
    before_keys: Callable[[], None] = _no_wait,
) -> list[int]:
    """Store formatted rows with COPY in one transaction; return each row's email id (existing id for a repeated key).

    Rows without idempotency keys are copied straight into the queue; rows with keys go
    through a temporary staging table so conflicts resolve to the first email's id.
    The ids are taken inside `ids_turn`, and `before_keys` runs before the first keyed row or
    link is written: writers sharing a load use them to keep ids and keys in input order.
    """
    if not rows:
        return []
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        got = cur.execute(_ID_SEQUENCE).fetchone()
        assert got is not None
        with ids_turn or nullcontext():
            ids = [int(r[0]) for r in cur.execute(_ALLOCATE_IDS, (got[0], len(rows))).fetchall()]
        allocated_ids = list(ids)
        groups: dict[tuple[bool, bool], list[tuple[int, str]]] = {}
        for i, (key, text, _, scheduled) in zip(ids, rows, strict=True):
            groups.setdefault((key is not None, scheduled), []).append((i, text))
        queue = sql.Identifier("mailroom", "email_queue")
        for scheduled in (False, True):
            if plain := groups.get((False, scheduled)):
                _copy_text(conn, queue, scheduled, plain)
        before_keys()
        if (True, False) in groups or (True, True) in groups:
            cur.execute(_STAGING)
            staging = sql.Identifier("mailroom_enqueue_staging")
            for scheduled in (False, True):
                if keyed := groups.get((True, scheduled)):
                    _copy_text(conn, staging, scheduled, keyed)
            cur.execute(_FROM_STAGING)
            resolved: dict[int, int] = {int(a): int(b) for a, b in cur.execute(_RESOLVE_KEYS).fetchall()}
            ids = [resolved.get(i, i) for i in ids]
        if any(r[2] for r in rows):
            # Links of a repeated idempotency key are dropped with its email (its id resolved elsewhere).
            _copy_links(
                conn, [(i, r[2]) for i, r, final in zip(allocated_ids, rows, ids, strict=True) if i == final]
            )
    return ids


def insert_batch(conn: psycopg.Connection[Any], rows: Sequence[tuple[Any, ...]]) -> list[int]:
    """Store prepared rows (from `prepare`) with COPY; see `insert_copy_rows`."""
    return insert_copy_rows(conn, [copy_row(row) for row in rows])
