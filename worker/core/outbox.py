"""How email enters the queue inside the caller's own transaction (the outbox pattern): the one home of
enqueue, for one email or many, synchronous or async.

Every enqueue takes the same steps, written once in `_enqueue_steps`: read the templates when a request
names one; ask the database what it says of the campaigns whose email is dressed with tracking or an
unsubscribe link (`mailroom.campaign_mail_policy`: open pixel, postal address); check and render every
request into its row (`worker.core.email_rows.prepare`, pure); insert the rows in one statement, which
answers each email's id and suppression verdict; give a repeated idempotency key the first email's id;
store the tracked links. One email is a batch of one, so `enqueue` and `enqueue_many` cannot disagree.

Sync and async: the steps are a generator that yields each statement (`Query`) and is sent its rows,
the way psycopg writes its connection logic once as generators that `wait` and `wait_async` drive.
The twins differ only in their driver (`_run`, `_run_async`): a loop that executes a statement, with
or without `await`, and holds no rule. That is simpler than generating the sync module from the async
one (psycopg's `tools/async_to_sync.py`) and leaves no copy of any step to keep by hand.

The bulk command (`worker.core.bulk`) prepares rows with the same `prepare` and the same campaign
policy, and writes them by COPY (`worker.core.copy_rows`) for speed.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, TypeVar, cast

import psycopg
from psycopg import sql
from psycopg.adapt import PyFormat
from psycopg.rows import RowFactory, dict_row, tuple_row

from worker.core.campaign_mail import NO_CAMPAIGNS, POLICIES, CampaignBook, book_from_policies
from worker.core.config import Settings
from worker.core.email_rows import (
    COLUMNS,
    LINKS,
    EmailRequest,
    address_array,
    campaign_to_ask,
    prepare,
    prepare_json,
    render_stored,
    request_from_json,
)
from worker.core.enqueued import Enqueued, from_row
from worker.core.templates import SELECT_TEMPLATES, TemplateCatalog, catalog_from_rows
from worker.core.validation import BatchValidationError, ValidationError

# The request and its row are defined in `worker.core.email_rows`; the door names them too.
__all__ = [
    "COLUMNS",
    "COLUMN_LIST",
    "LINKS",
    "EmailRequest",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "load_catalog",
    "load_catalog_async",
    "prepare",
    "prepare_json",
    "render_stored",
    "request_from_json",
]

_T = TypeVar("_T")

COLUMN_LIST = sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS)
# Each column is passed as one array of its values; the lists of addresses as a `text[]` literal per
# email (`address_array`: an array of arrays would have to be rectangular).
_LISTS = ("to_extra", "cc", "bcc", "reply_to")
_TYPES = {
    "headers": "jsonb",
    "template_data": "jsonb",
    "priority": "integer",
    "scheduled_for": "timestamptz",
    "max_retries": "integer",
    "transactional": "boolean",
    "tracking_token": "uuid",
    "unsubscribe_token": "uuid",
    "track_opens": "boolean",
    "track_clicks": "boolean",
}
# Arrays go in binary, whose dumping costs a quarter of the text form's (that was more than `prepare`);
# scheduled_for's as text, which also takes a list mixing naive and aware times.
_FORMATS = {"scheduled_for": PyFormat.TEXT}
# One INSERT for one email or many: the rows come from VALUES for one (their arrays would cost more to
# send than the email) and from unnest for many (one statement: the queue's statement triggers run once).
# RETURNING gives the inserted rows in the order of the SELECT's ORDER BY (PostgreSQL inserts and
# returns row by row; SQLAlchemy's insertmanyvalues relies on the same), without the rows a repeated
# idempotency key kept out; each answer carries its key, so `_answers` matches them to the requests and
# checks it. The verdict is the enqueue-time check's, computed as the statement trigger computes it
# (RETURNING runs before that trigger stores the email suppressed): the caller is told at once, the
# reason only if it may read the suppression list (mailroom.suppression_told).
_INSERT = sql.SQL(
    "INSERT INTO mailroom.email_queue ({columns}) {rows}"
    " ON CONFLICT (enqueued_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
    " RETURNING id, idempotency_key,"
    " mailroom.enqueue_suppression(status, recipient_email, to_extra, cc, bcc, transactional)"
)
_UNNEST = sql.SQL("SELECT {values} FROM unnest({arrays}) WITH ORDINALITY AS given({columns}, n) ORDER BY n")
# Composed once into plain text: a Composed statement is rendered again on every execute.
INSERT_ONE = _INSERT.format(
    columns=COLUMN_LIST,
    rows=sql.SQL("VALUES ({})").format(sql.SQL(", ").join(sql.Placeholder() for _ in COLUMNS)),
).as_string(None)
INSERT_MANY = _INSERT.format(
    columns=COLUMN_LIST,
    rows=_UNNEST.format(
        columns=COLUMN_LIST,
        values=sql.SQL(", ").join(
            sql.SQL("given.{}::text[]" if c in _LISTS else "given.{}").format(sql.Identifier(c))
            for c in COLUMNS
        ),
        arrays=sql.SQL(", ").join(
            sql.SQL("{}::{}[]").format(
                sql.Placeholder(format=_FORMATS.get(c, PyFormat.BINARY)), sql.SQL(_TYPES.get(c, "text"))
            )
            for c in COLUMNS
        ),
    ),
).as_string(None)
# An idempotency key belongs to the role that enqueued (`enqueued_by`, session_user by default): the
# same key from another role is another email, and the lookup never answers with another role's id.
# Why it is suppressed as the caller may be told it (mailroom.suppression_told), as the INSERT's answer.
SELECT_BY_KEYS = (
    "SELECT idempotency_key, id,"
    " mailroom.suppression_told(CASE WHEN status = 'suppressed' THEN suppression_reason END)"
    " FROM mailroom.email_queue WHERE enqueued_by = session_user AND idempotency_key = ANY(%s)"
)
INSERT_LINKS = (
    "INSERT INTO mailroom.tracked_links (token, email_id, position, url)"
    " SELECT * FROM unnest(%b::uuid[], %b::bigint[], %b::integer[], %b::text[])"
)
_KEY = COLUMNS.index("idempotency_key")
_LIST_INDEXES = tuple(COLUMNS.index(c) for c in _LISTS)

Rows = list[Any]


@dataclass(frozen=True)
class Query:
    """One statement a step needs run; the driver sends back the rows it returns (none: `[]`)."""

    statement: str
    params: Sequence[Any] = ()
    row_factory: RowFactory[Any] = tuple_row  # tuples whatever rows the caller's connection makes


# The steps of an enqueue: they yield statements, are sent their rows, and return a value.
Steps = Generator[Query, Rows, _T]


def enqueue(
    conn: psycopg.Connection[Any],
    request: EmailRequest,
    *,
    settings: Settings | None = None,
    created_by: str | None = None,
) -> Enqueued:
    """Enqueue one email in the caller's open transaction and return its id (with its suppression).

    Nothing is committed here: the email exists exactly when the caller's transaction
    commits. The same `idempotency_key` again from the same database role returns the first
    email's id and stores nothing; keys are per role, so another application's are out of reach.
    Settings default to the `MAILROOM_*` environment. Raises `ValidationError` for a refused field.
    """
    return _run(conn, _enqueue_steps([request], settings, created_by, indexed=False))[0]


async def enqueue_async(
    conn: psycopg.AsyncConnection[Any],
    request: EmailRequest,
    *,
    settings: Settings | None = None,
    created_by: str | None = None,
) -> Enqueued:
    """Async twin of `enqueue`, for `psycopg.AsyncConnection`."""
    return (await _run_async(conn, _enqueue_steps([request], settings, created_by, indexed=False)))[0]


def enqueue_many(
    conn: psycopg.Connection[Any],
    requests: Iterable[EmailRequest],
    *,
    settings: Settings | None = None,
    created_by: str | None = None,
) -> list[Enqueued]:
    """Enqueue several emails as `enqueue` does, in one INSERT; their ids in the requests' order.

    Every request is checked before any is written: a refused one raises `BatchValidationError`
    naming its index, and nothing is written. A key repeated (stored earlier, or earlier in the
    same call) gets the first email's id.
    """
    return _run(conn, _enqueue_steps(list(requests), settings, created_by, indexed=True))


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any],
    requests: Iterable[EmailRequest],
    *,
    settings: Settings | None = None,
    created_by: str | None = None,
) -> list[Enqueued]:
    """Async twin of `enqueue_many`, for `psycopg.AsyncConnection`."""
    return await _run_async(conn, _enqueue_steps(list(requests), settings, created_by, indexed=True))


def load_catalog(conn: psycopg.Connection[Any], settings: Settings) -> TemplateCatalog:
    """Read the template catalog visible to this connection's transaction."""
    return _run(conn, _catalog_steps(settings))


async def load_catalog_async(conn: psycopg.AsyncConnection[Any], settings: Settings) -> TemplateCatalog:
    """Async twin of `load_catalog`."""
    return await _run_async(conn, _catalog_steps(settings))


def _run(conn: psycopg.Connection[Any], steps: Steps[_T]) -> _T:
    """Drive `steps` on `conn`: execute each statement they yield, send its rows back, until they return."""
    answer: Any = None  # a generator starts with send(None)
    while True:
        try:
            query = steps.send(answer)
        except StopIteration as done:
            return cast(_T, done.value)
        with conn.cursor(row_factory=query.row_factory) as cur:
            cur.execute(query.statement, query.params)
            answer = cur.fetchall() if cur.description is not None else []


async def _run_async(conn: psycopg.AsyncConnection[Any], steps: Steps[_T]) -> _T:
    """`_run` with `await`: the async twins' driver."""
    answer: Any = None
    while True:
        try:
            query = steps.send(answer)
        except StopIteration as done:
            return cast(_T, done.value)
        async with conn.cursor(row_factory=query.row_factory) as cur:
            await cur.execute(query.statement, query.params)
            answer = await cur.fetchall() if cur.description is not None else []


def _enqueue_steps(
    batch: Sequence[EmailRequest], settings: Settings | None, created_by: str | None, *, indexed: bool
) -> Steps[list[Enqueued]]:
    """Every step of an enqueue, single or batch (`indexed`: a refusal names the request's position)."""
    if not batch:
        return []
    settings = settings or Settings.from_env()
    catalog = (yield from _catalog_steps(settings)) if any(r.template for r in batch) else None
    book = yield from _book_steps(batch)
    rows = _prepared(batch, catalog, settings, created_by, book, indexed=indexed)
    answers, written = _answers(rows, (yield _insert(rows)))
    if stored_before := sorted({row[_KEY] for row, got in zip(rows, answers, strict=True) if got is None}):
        found = yield Query(SELECT_BY_KEYS, (stored_before,))
        firsts = {key: from_row((email_id, told)) for key, email_id, told in found}
        answers = [
            firsts.get(row[_KEY]) if got is None else got for row, got in zip(rows, answers, strict=True)
        ]
    ids = [got for got in answers if got is not None]
    assert len(ids) == len(rows)  # every key stored before this call was found
    links = _link_arrays([(row, got) for row, got, new in zip(rows, ids, written, strict=True) if new])
    if links[0]:
        yield Query(INSERT_LINKS, links)
    return ids


def _catalog_steps(settings: Settings) -> Steps[TemplateCatalog]:
    rows = yield Query(SELECT_TEMPLATES, row_factory=dict_row)
    return catalog_from_rows(rows, settings.default_locale)


def _book_steps(batch: Sequence[EmailRequest]) -> Steps[CampaignBook]:
    """What the database says of the campaigns whose policy the batch's rows need (no statement if none)."""
    campaigns = sorted({c for request in batch if (c := campaign_to_ask(request)) is not None})
    if not campaigns:
        return NO_CAMPAIGNS
    return book_from_policies((yield Query(POLICIES, (campaigns,))))


def _prepared(
    batch: Sequence[EmailRequest],
    catalog: TemplateCatalog | None,
    settings: Settings,
    created_by: str | None,
    book: CampaignBook,
    *,
    indexed: bool,
) -> list[tuple[Any, ...]]:
    """Every request checked and rendered into its row, or the first refusal (with its position if `indexed`)."""
    rows: list[tuple[Any, ...]] = []
    for index, request in enumerate(batch):
        try:
            rows.append(prepare(request, catalog, settings, created_by, book))
        except ValidationError as exc:
            if not indexed:
                raise
            raise BatchValidationError(index, exc.field, exc.message) from None
    return rows


def _insert(rows: Sequence[tuple[Any, ...]]) -> Query:
    """The INSERT of the rows: `INSERT_ONE` for one, `INSERT_MANY` with its column arrays for more."""
    if len(rows) == 1:
        return Query(INSERT_ONE, rows[0][:LINKS])
    return Query(INSERT_MANY, _column_arrays(rows))


def _column_arrays(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """`INSERT_MANY`'s parameters: one list per column, the lists of addresses as array literals."""
    arrays = [list(values) for values in islice(zip(*rows, strict=True), LINKS)]
    for i in _LIST_INDEXES:
        arrays[i] = [None if v is None else address_array(v) for v in arrays[i]]
    return arrays


def _answers(rows: Sequence[tuple[Any, ...]], returned: Rows) -> tuple[list[Enqueued | None], list[bool]]:
    """Each row's answer from the INSERT (None: its key was stored before this call), and whether
    it was written. The answers come in the rows' order, without the rows a key kept out."""
    answers: list[Enqueued | None] = []
    written: list[bool] = []
    firsts: dict[str, Enqueued] = {}  # keys written by this call: a repeat gets the first email's answer
    position = 0
    for row in rows:
        key = row[_KEY]
        got = returned[position] if position < len(returned) else None
        if got is not None and got[1] == key and key not in firsts:
            answer = from_row((got[0], got[2]))
            position += 1
            if key is not None:
                firsts[key] = answer
            answers.append(answer)
            written.append(True)
        elif key is None:  # only a key keeps a row out: anything else is an answer out of order
            raise RuntimeError("enqueue: the INSERT's answers do not follow the requests' order")
        else:
            answers.append(firsts.get(key))
            written.append(False)
    if position != len(returned):
        raise RuntimeError("enqueue: the INSERT answered rows that match no request")
    return answers, written


def _link_arrays(written: Sequence[tuple[tuple[Any, ...], Enqueued]]) -> list[list[Any]]:
    """`INSERT_LINKS`'s parameters (tokens, email ids, positions, urls) for the emails written."""
    arrays: list[list[Any]] = [[], [], [], []]
    for row, email_id in written:
        for position, (token, url) in enumerate(row[LINKS]):
            arrays[0].append(token)
            arrays[1].append(int(email_id))
            arrays[2].append(position)
            arrays[3].append(url)
    return arrays
