"""Bulk enqueue of JSON lines: validation in worker processes, COPY on a writer thread, results in input order.

Validation and COPY formatting are pure Python and CPU-bound, so on a large input they run
in a pool of processes (the GIL would serialise threads); a small input is handled inline.
A writer thread commits one batch while the next is being prepared.

COPY needs a role that may write the queue (an operator's). An application role (`mailroom db grant
app`) may not: its lines are prepared by the same `prepare` and written through the door every
application uses, `mailroom.enqueue_rows` (`worker.core.outbox.write_rows`), a batch at a time.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import multiprocessing.context
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.campaign_mail import CampaignBook, load_book, load_policies
from worker.core.config import Settings
from worker.core.copy_rows import CopyRow, copy_row, insert_copy_rows
from worker.core.email_rows import COLUMNS, FILES, EmailRequest, prepare, prepare_json, request_from_json
from worker.core.json_lines import decode_line
from worker.core.outbox import from_refusals, may_dress, write_rows
from worker.core.templates import SELECT_TEMPLATES, TemplateCatalog, catalog_from_rows
from worker.core.validation import ValidationError

# Processes cost about a second to start: only an input longer than this many batches gets them.
POOL_AFTER_BATCHES = 4
_FROM = COLUMNS.index("from_email")
# Connections storing batches at once when processes validate (each PostgreSQL backend uses one core).
WRITERS = 2

# (line number, JSON result text) in input order
Results = list[tuple[int, str]]
# A prepared batch: accepted rows with their line numbers, the rejected lines' results, and the rows COPY
# does not take (files, a From of its own), prepared, for the door (`worker.core.outbox.write_rows`)
Batch = tuple[list[tuple[int, CopyRow]], Results, list[tuple[int, tuple[Any, ...]]]]


@dataclass
class BulkCounts:
    """How a bulk load went."""

    accepted: int = 0
    rejected: int = 0
    errors: list[BaseException] = field(default_factory=list)


_catalog: TemplateCatalog | None = None
_settings: Settings | None = None
_book: CampaignBook | None = None


def _init(settings: Settings, template_rows: list[dict[str, Any]], book: CampaignBook | None = None) -> None:
    """Give this process (a pool worker, or the caller when inline) what validation needs."""
    global _catalog, _settings, _book
    _settings = settings
    _catalog = catalog_from_rows(template_rows, settings.default_locale)
    _book = book


def prepare_chunk(lines: list[tuple[int, str]]) -> Batch:
    """Validate and COPY-format numbered JSON lines; rejected lines become error results."""
    assert _settings is not None
    accepted: list[tuple[int, CopyRow]] = []
    rejected: Results = []
    door: list[tuple[int, tuple[Any, ...]]] = []
    for number, text in lines:
        try:
            row = prepare_json(decode_line(text), _catalog, _settings, "cli", _book)
            if row[FILES] or row[_FROM] is not None:
                door.append((number, row))
            else:
                accepted.append((number, copy_row(row)))
        except ValidationError as exc:
            rejected.append((number, _rejected_line(number, exc)))
    return accepted, rejected, door


def _chunks(lines: Iterable[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    iterator = iter(lines)
    while chunk := list(islice(iterator, size)):
        yield chunk


def _pool_context() -> multiprocessing.context.BaseContext:
    # A fork server imports what validation needs once and forks each worker from it, instead of
    # every spawned worker importing it again (~0.4 s of CPU each). Never a plain fork: the caller
    # has threads and open connections.
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["worker.core.bulk"])
        return context
    return multiprocessing.get_context("spawn")


class _Turns:
    """Lets several writers work on consecutive batches at once while ids, keys and commits keep input order.

    Batch k allocates its ids after batch k-1 did, and writes keyed rows, commits and emits after
    batch k-1 committed. After a batch fails, later batches roll back: what is committed is always
    every batch before the first failure, as with one writer.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._allocated = 0  # batches that have their ids
        self._committed = 0  # batches committed and emitted
        self.failed_at: int | None = None
        self.error: BaseException | None = None

    def _wait(self, ready: Callable[[], bool], index: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: ready() or (self.failed_at is not None and self.failed_at < index))
            if not ready():
                raise _Abandoned

    @contextmanager
    def ids(self, index: int) -> Iterator[None]:
        """Batch `index` takes its ids inside this, after batch `index` - 1 took its own."""
        self._wait(lambda: self._allocated == index, index)
        yield
        with self._changed:
            self._allocated = index + 1
            self._changed.notify_all()

    def commit(self, index: int) -> None:
        """Wait until every batch before `index` has committed and emitted."""
        self._wait(lambda: self._committed == index, index)

    def committed(self, index: int) -> None:
        """Batch `index` is committed and emitted: the next may follow."""
        with self._changed:
            self._allocated = max(self._allocated, index + 1)
            self._committed = index + 1
            self._changed.notify_all()

    def fail(self, index: int, exc: BaseException) -> None:
        """Batch `index` failed: later batches roll back."""
        with self._changed:
            if self.failed_at is None or index < self.failed_at:
                self.failed_at, self.error = index, exc
            self._changed.notify_all()


class _Abandoned(Exception):
    """An earlier batch failed, so this one is rolled back."""


def enqueue_lines(
    url: str,
    lines: Iterable[tuple[int, str]],
    settings: Settings,
    emit: Callable[[Results], None],
    batch_size: int = 5000,
    jobs: int = 2,
) -> BulkCounts:
    """Validate and store numbered JSON lines; `emit` receives each batch's results once it is committed.

    Each batch commits on its own, so accepted lines stay accepted whatever comes later.
    With `jobs` > 1, inputs longer than `POOL_AFTER_BATCHES` batches are validated by that many
    processes and stored by `WRITERS` connections at once (PostgreSQL then uses more than one core),
    committed and emitted in input order.
    """
    chunks = _chunks(lines, batch_size)
    if not may_copy(url):
        return _through_the_door(url, chunks, settings, emit)
    # Read a few batches ahead to know whether the input is long enough for processes.
    ahead = list(islice(chunks, POOL_AFTER_BATCHES + 1))
    parallel = jobs > 1 and len(ahead) > POOL_AFTER_BATCHES
    run = _BulkRun(url, emit, WRITERS if parallel else 1, jobs)
    with psycopg.connect(url) as conn, conn.cursor(row_factory=dict_row) as cur:
        template_rows = cur.execute(SELECT_TEMPLATES).fetchall()
        book = load_book(conn)
    _init(settings, template_rows, book)
    pool = None
    if parallel:
        pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=_pool_context(),
            initializer=_init,
            initargs=(settings, template_rows, book),
        )
    run.feed(itertools.chain(ahead, chunks), pool)
    if run.turns.error is not None:
        raise run.turns.error
    return run.counts


# COPY writes the queue and its links itself (and reads every campaign's policy from its table).
_MAY_COPY = (
    "SELECT has_table_privilege('mailroom.email_queue', 'INSERT')"
    " AND has_table_privilege('mailroom.tracked_links', 'INSERT')"
    " AND has_table_privilege('mailroom.campaigns', 'SELECT')"
)


def may_copy(url: str) -> bool:
    """Whether the role `url` connects as may load by COPY (else it goes through the door)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(_MAY_COPY).fetchone()
    return bool(row and row[0])


def _through_the_door(
    url: str, chunks: Iterable[list[tuple[int, str]]], settings: Settings, emit: Callable[[Results], None]
) -> BulkCounts:
    """An application role's bulk load: each batch prepared here, line by line, and written through
    `mailroom.enqueue_rows` in one transaction, committed, then emitted."""
    counts = BulkCounts()
    # Autocommit: each batch is its own transaction (`conn.transaction()` below), committed before its
    # lines are printed; nothing read between batches holds a transaction open.
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor(row_factory=dict_row) as cur:
            catalog = catalog_from_rows(cur.execute(SELECT_TEMPLATES).fetchall(), settings.default_locale)
        dress_here = may_dress(conn)
        for chunk in chunks:
            done: Results = []
            requests: list[tuple[int, EmailRequest]] = []
            for number, text in chunk:
                try:
                    requests.append((number, request_from_json(decode_line(text))))
                except ValidationError as exc:
                    done.append((number, _rejected_line(number, exc)))
            book = load_policies(conn, [r for _, r in requests])
            rows: list[tuple[int, tuple[Any, ...]]] = []
            for number, request in requests:
                try:
                    rows.append(
                        (number, prepare(request, catalog, settings, "cli", book, dress_here=dress_here))
                    )
                except ValidationError as exc:
                    done.append((number, _rejected_line(number, exc)))
            refused = from_refusals(conn, [row for _, row in rows])
            done += [(rows[i][0], _rejected_line(rows[i][0], exc)) for i, exc in refused.items()]
            rows = [row for i, row in enumerate(rows) if i not in refused]
            with conn.transaction():
                answers = write_rows(conn, [row for _, row in rows])
            done += [
                (n, _accepted_line(n, int(a), a.suppression_reason if a.suppressed else None))
                for (n, _), a in zip(rows, answers, strict=True)
            ]
            done.sort(key=lambda result: result[0])
            emit(done)
            counts.accepted += len(answers)
            counts.rejected += len(done) - len(answers)
    return counts


def _rejected_line(number: int, exc: ValidationError) -> str:
    return json.dumps({"line": number, "error": str(exc), "field": exc.field})


class _BulkRun:
    """One bulk enqueue: writer threads that store prepared batches, in input order, through `turns`."""

    def __init__(self, url: str, emit: Callable[[Results], None], writers: int, jobs: int) -> None:
        self.url = url
        self.emit = emit
        self.counts = BulkCounts()
        self.turns = _Turns()
        self.inboxes: list[queue.Queue[tuple[int, Future[Batch] | Batch] | None]] = [
            queue.Queue(maxsize=jobs + 2) for _ in range(writers)
        ]

    def feed(self, chunks: Iterable[list[tuple[int, str]]], pool: ProcessPoolExecutor | None) -> None:
        """Prepare every chunk (the first one here while the pool's processes start) and hand it to a writer."""
        threads = [
            threading.Thread(target=self.writer, args=(inbox,), name=f"mailroom-bulk-writer-{n}", daemon=True)
            for n, inbox in enumerate(self.inboxes)
        ]
        for thread in threads:
            thread.start()
        try:
            for index, chunk in enumerate(chunks):
                if self.turns.failed_at is not None:
                    break
                item = (
                    pool.submit(prepare_chunk, chunk)
                    if pool is not None and index > 0
                    else prepare_chunk(chunk)
                )
                self.inboxes[index % len(self.inboxes)].put((index, item))
        finally:
            for inbox in self.inboxes:
                inbox.put(None)
            for thread in threads:
                thread.join()
            if pool is not None:
                pool.shutdown(cancel_futures=True)

    def writer(self, inbox: queue.Queue[tuple[int, Future[Batch] | Batch] | None]) -> None:
        """Store what arrives in `inbox` until told to stop; a failure stops every later batch."""
        index = -1
        try:
            with psycopg.connect(self.url) as conn:
                while (got := inbox.get()) is not None:
                    index, item = got
                    self.store(conn, index, item)
            return
        except _Abandoned:
            pass
        except BaseException as exc:  # surfaced to the caller by enqueue_lines
            self.counts.errors.append(exc)
            self.turns.fail(index, exc)
        while inbox.get() is not None:  # let the reader finish putting
            pass

    def store(self, conn: psycopg.Connection[Any], index: int, item: Future[Batch] | Batch) -> None:
        """Insert one batch in its turn, commit it, and emit one result line per input line."""
        accepted, rejected, door = item.result() if isinstance(item, Future) else item
        turns = self.turns
        ids = insert_copy_rows(
            conn,
            [row for _, row in accepted],
            ids_turn=turns.ids(index),
            before_keys=lambda: turns.commit(index),
        )
        if not accepted:
            with turns.ids(index):
                pass
            turns.commit(index)
        suppressed = _suppressed(conn, ids)
        done = rejected + [
            (n, _accepted_line(n, i, suppressed.get(i))) for (n, _), i in zip(accepted, ids, strict=True)
        ]
        through_door = _through_door(conn, door, done) if door else 0
        if rejected or door:  # accepted lines are in input order already
            done.sort(key=lambda result: result[0])
        self.emit(done)
        self.counts.accepted += len(ids) + through_door
        self.counts.rejected += len(done) - len(ids) - through_door
        turns.committed(index)


def _through_door(
    conn: psycopg.Connection[Any], door: list[tuple[int, tuple[Any, ...]]], done: Results
) -> int:
    """Write a COPY batch's rows with files or a From of their own through the door, in their own
    transaction after the batch's COPY committed; each one's result line added to `done`. How many
    were written."""
    with conn.transaction():
        refused = from_refusals(conn, [row for _, row in door])
        done += [(door[i][0], _rejected_line(door[i][0], exc)) for i, exc in refused.items()]
        kept = [(n, row) for i, (n, row) in enumerate(door) if i not in refused]
        answers = write_rows(conn, [row for _, row in kept])
    done += [
        (n, _accepted_line(n, int(a), a.suppression_reason if a.suppressed else None))
        for (n, _), a in zip(kept, answers, strict=True)
    ]
    return len(answers)


# The emails of a batch the enqueue-time check stored suppressed (mailroom.email_queue_suppress_listed),
# and why as far as the connected role may be told (mailroom.suppression_told).
SUPPRESSED = (
    "SELECT id, mailroom.suppression_told(suppression_reason) FROM mailroom.email_queue"
    " WHERE id = ANY(%s) AND status = 'suppressed'"
)


def _suppressed(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, str]:
    """Which of `ids` were stored suppressed, with the reason: their result lines say so."""
    if not ids:
        return {}
    # Its own short transaction: an implicit one left open would turn the next batch's into a savepoint.
    with conn.transaction(), conn.cursor() as cur:
        return {int(i): str(why) for i, why in cur.execute(SUPPRESSED, (ids,)).fetchall()}


def _accepted_line(line: int, email_id: int, suppressed: str | None) -> str:
    """`{"line": N, "id": ID}`, with `"suppressed": reason` for an email that will not be sent."""
    if suppressed is None:
        return f'{{"line": {line}, "id": {email_id}}}'
    return json.dumps({"line": line, "id": email_id, "suppressed": suppressed})
