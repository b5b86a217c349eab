"""How email enters the queue inside the caller's own transaction (the outbox pattern): the one home of
enqueue, for one email or many, synchronous or async.

Every enqueue takes the same steps, written once in `_enqueue_steps`: read the templates when a request
names one; ask the database what it says of the campaigns whose email is dressed with tracking or an
unsubscribe link (`mailroom.campaign_mail_policy`: open pixel, postal address); check and render every
request into its row (`worker.core.email_rows.prepare`, pure); hand the rows and their tracked links to
`mailroom.enqueue_rows`, the door every role may use, which answers each email's id (the first email's
for a repeated idempotency key) and suppression verdict. One email is a batch of one, so `enqueue` and
`enqueue_many` cannot disagree.

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
    DRESS,
    FILES,
    LINKS,
    EmailRequest,
    address_array,
    campaigns_to_ask,
    needs_dress,
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
    "from_refusals",
    "load_catalog",
    "load_catalog_async",
    "may_dress",
    "prepare",
    "prepare_json",
    "render_stored",
    "request_from_json",
    "write_rows",
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
    "expires_at": "timestamptz",
    "max_retries": "integer",
    "transactional": "boolean",
    "tracking_token": "uuid",
    "unsubscribe_token": "uuid",
    "track_opens": "boolean",
    "track_clicks": "boolean",
}
# Arrays go in binary, whose dumping costs a quarter of the text form's (that was more than `prepare`);
# scheduled_for's as text, which also takes a list mixing naive and aware times.
_FORMATS = {"scheduled_for": PyFormat.TEXT, "expires_at": PyFormat.TEXT}
# After the columns: the dress, the tracked links, then the files (each naming its email by its place in
# the call, from 1, and its content by its place in `contents`, where each content appears once).
_MORE = (
    ("dress", "jsonb"),
    ("link_email", "integer"),
    ("link_position", "integer"),
    ("link_token", "uuid"),
    ("link_url", "text"),
    ("attachment_email", "integer"),
    ("attachment_position", "integer"),
    ("attachment_filename", "text"),
    ("attachment_type", "text"),
    ("attachment_cid", "text"),
    ("attachment_data", "integer"),
    ("contents", "bytea"),
)
# Every writer goes through one door, `mailroom.enqueue_rows` (migrations/versions/0012): a SECURITY
# DEFINER function an application role may call without any privilege on the queue's tables. It writes
# the rows in one statement (the queue's statement triggers run once) with their tracked links, and
# answers one row per request in the requests' order: its id (the first email's for a key this role
# used before, in this call or earlier), and its suppression as the caller may be told it
# (mailroom.suppression_told).
# Who may dress its own campaign email: a role that may write the queue (the door's `trusted`).
TRUSTED = "SELECT has_table_privilege(session_user, 'mailroom.email_queue', 'INSERT')"
ENQUEUE_ROWS = (
    sql.SQL("SELECT id, suppression FROM mailroom.enqueue_rows({arrays})")
    .format(
        arrays=sql.SQL(", ").join(
            [
                sql.SQL("{} => {}::{}[]").format(
                    sql.Identifier(c),
                    sql.Placeholder(format=_FORMATS.get(c, PyFormat.BINARY)),
                    sql.SQL(_TYPES.get(c, "text")),
                )
                for c in COLUMNS
            ]
            + [sql.SQL("{} => %b::{}[]").format(sql.Identifier(n), sql.SQL(t)) for n, t in _MORE]
        )
    )
    .as_string(None)
)
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


def may_dress(conn: psycopg.Connection[Any]) -> bool:
    """Whether the connected role dresses its own campaign email (it may write the queue), else the
    worker does: `prepare(..., dress_here=may_dress(conn))` for rows given to `write_rows`."""
    return _run(conn, _trusted_steps())


def write_rows(conn: psycopg.Connection[Any], rows: Sequence[tuple[Any, ...]]) -> list[Enqueued]:
    """Write rows `prepare` made through the door (`mailroom.enqueue_rows`), in the caller's transaction;
    each row's answer in their order. For a caller that prepares rows itself (the bulk command, line by
    line), so one refused line does not refuse the others."""
    return _run(conn, _write_steps(rows)) if rows else []


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
    dress_here = (yield from _trusted_steps()) if any(needs_dress(r) for r in batch) else True
    rows = _prepared(batch, catalog, settings, created_by, book, indexed=indexed, dress_here=dress_here)
    if any(r.from_email for r in batch):
        yield from _from_steps(rows, indexed=indexed)
    return (yield from _write_steps(rows))


_FROM = COLUMNS.index("from_email")
_STREAM = COLUMNS.index("stream")
FROM_REFUSALS = "SELECT mailroom.from_refusals(%s::text[], %s::text[])"


def from_refusals(
    conn: psycopg.Connection[Any], rows: Sequence[tuple[Any, ...]]
) -> dict[int, ValidationError]:
    """The rows (by place, from 0) whose own From no sender account of their stream may send, each with
    its refusal: for a caller of `write_rows` that refuses them one by one (the door refuses the call)."""
    if not any(r[_FROM] for r in rows):
        return {}
    return _run(conn, _refusal_steps(rows))


def _refusal_steps(rows: Sequence[tuple[Any, ...]]) -> Steps[dict[int, ValidationError]]:
    refused = (yield Query(FROM_REFUSALS, ([r[_FROM] for r in rows], [r[_STREAM] for r in rows])))[0][0]
    return {n - 1: _from_refused(rows[n - 1]) for n in refused}


def _from_refused(row: tuple[Any, ...]) -> ValidationError:
    domain = row[_FROM].rpartition("@")[2]
    return ValidationError(
        "from_email",
        f"no sender account of stream {row[_STREAM]!r} may send for {domain}"
        " (mailroom senders edit NAME --from-domain DOMAIN)",
    )


def _from_steps(rows: Sequence[tuple[Any, ...]], *, indexed: bool) -> Steps[None]:
    """Ask the database whether a sender account of each row's stream may send its own From: the first
    that none may is refused (the door refuses it too, for a caller that does not ask)."""
    refused: dict[int, ValidationError] = yield from _refusal_steps(rows)
    if refused:
        index = min(refused)
        if indexed:
            raise BatchValidationError(index, "from_email", refused[index].message)
        raise refused[index]


def _trusted_steps() -> Steps[bool]:
    """Whether the connected role may write the queue itself, and so dress its own campaign email: an
    application role's is dressed by the worker, with tokens it never sees (`mailroom.enqueue_rows`)."""
    return bool((yield Query(TRUSTED))[0][0])


def _write_steps(rows: Sequence[tuple[Any, ...]]) -> Steps[list[Enqueued]]:
    answers = yield Query(ENQUEUE_ROWS, _arrays(rows))
    if len(answers) != len(rows):
        raise RuntimeError("enqueue: mailroom.enqueue_rows answered another number of rows than it was given")
    return [from_row(answer) for answer in answers]


def _catalog_steps(settings: Settings) -> Steps[TemplateCatalog]:
    rows = yield Query(SELECT_TEMPLATES, row_factory=dict_row)
    return catalog_from_rows(rows, settings.default_locale)


def _book_steps(batch: Sequence[EmailRequest]) -> Steps[CampaignBook]:
    """What the database says of the campaigns whose policy the batch's rows need (no statement if none)."""
    if not (campaigns := campaigns_to_ask(batch)):
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
    dress_here: bool = True,
) -> list[tuple[Any, ...]]:
    """Every request checked and rendered into its row, or the first refusal (with its position if `indexed`)."""
    rows: list[tuple[Any, ...]] = []
    for index, request in enumerate(batch):
        try:
            rows.append(prepare(request, catalog, settings, created_by, book, dress_here=dress_here))
        except ValidationError as exc:
            if not indexed:
                raise
            raise BatchValidationError(index, exc.field, exc.message) from None
    return rows


def _arrays(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """`ENQUEUE_ROWS`'s parameters: one list per column (the lists of addresses as array literals),
    the dress, the tracked links as four lists (the email's position from 1, the link's, token, url),
    then the files (`_file_arrays`)."""
    arrays = [list(values) for values in islice(zip(*rows, strict=True), LINKS)]
    for i in _LIST_INDEXES:
        arrays[i] = [None if v is None else address_array(v) for v in arrays[i]]
    links: list[list[Any]] = [[], [], [], []]
    for n, row in enumerate(rows, 1):
        for position, (token, url) in enumerate(row[LINKS]):
            links[0].append(n)
            links[1].append(position)
            links[2].append(token)
            links[3].append(url)
    return [*arrays, [row[DRESS] for row in rows], *links, *_file_arrays(rows)]


def _file_arrays(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """The files of the rows as six lists (email's place from 1, file's place, filename, content type,
    Content-ID, content's place in `contents` from 1) and `contents`, each distinct content once."""
    arrays: list[list[Any]] = [[], [], [], [], [], [], []]
    places: dict[bytes, int] = {}
    for n, row in enumerate(rows, 1):
        for file in row[FILES]:
            place = places.get(file.content)
            if place is None:
                arrays[6].append(file.content)
                place = places[file.content] = len(arrays[6])
            for i, value in enumerate(
                (n, file.position, file.filename, file.content_type, file.content_id, place)
            ):
                arrays[i].append(value)
    return arrays
