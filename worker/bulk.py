"""Bulk enqueue of JSON lines: validation in worker processes, COPY on a writer thread, results in input order.

Validation and COPY formatting are pure Python and CPU-bound, so on a large input they run
in a pool of processes (the GIL would serialise threads); a small input is handled inline.
A writer thread commits one batch while the next is being prepared.
"""

from __future__ import annotations

import json
import multiprocessing
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.config import Settings
from worker.outbox import CopyRow, copy_row, decode_line, insert_copy_rows, prepare_json
from worker.templates import SELECT_TEMPLATES, TemplateCatalog, catalog_from_rows
from worker.validation import ValidationError

# Processes cost about a second to start: only an input longer than this many batches gets them.
POOL_AFTER_BATCHES = 4

# (line number, JSON result text) in input order
Results = list[tuple[int, str]]
# A prepared batch: accepted rows with their line numbers, and the rejected lines' results
Batch = tuple[list[tuple[int, CopyRow]], Results]


@dataclass
class BulkCounts:
    """How a bulk load went."""

    accepted: int = 0
    rejected: int = 0
    errors: list[BaseException] = field(default_factory=list)


_catalog: TemplateCatalog | None = None
_settings: Settings | None = None


def _init(settings: Settings, template_rows: list[dict[str, Any]]) -> None:
    """Give this process (a pool worker, or the caller when inline) what validation needs."""
    global _catalog, _settings
    _settings = settings
    _catalog = catalog_from_rows(template_rows, settings.default_locale)


def prepare_chunk(lines: list[tuple[int, str]]) -> Batch:
    """Validate and COPY-format numbered JSON lines; rejected lines become error results."""
    assert _settings is not None
    accepted: list[tuple[int, CopyRow]] = []
    rejected: Results = []
    for number, text in lines:
        try:
            accepted.append(
                (number, copy_row(prepare_json(decode_line(text), _catalog, _settings, created_by="cli")))
            )
        except ValidationError as exc:
            rejected.append((number, json.dumps({"line": number, "error": str(exc), "field": exc.field})))
    return accepted, rejected


def _chunks(lines: Iterable[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    iterator = iter(lines)
    while chunk := list(islice(iterator, size)):
        yield chunk


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
    With `jobs` > 1, inputs longer than `POOL_AFTER_BATCHES` batches are validated by that many processes.
    """
    counts = BulkCounts()
    batches: queue.Queue[Future[Batch] | Batch | None] = queue.Queue(maxsize=jobs + 2)

    def writer() -> None:
        try:
            with psycopg.connect(url) as conn:
                while (item := batches.get()) is not None:
                    accepted, rejected = item.result() if isinstance(item, Future) else item
                    ids = insert_copy_rows(conn, [row for _, row in accepted])
                    done = rejected + [
                        (n, f'{{"line": {n}, "id": {i}}}') for (n, _), i in zip(accepted, ids, strict=True)
                    ]
                    done.sort(key=lambda result: result[0])
                    emit(done)
                    counts.accepted += len(ids)
                    counts.rejected += len(rejected)
        except BaseException as exc:  # surfaced to the caller below
            counts.errors.append(exc)
            while batches.get() is not None:
                pass

    with psycopg.connect(url) as conn, conn.cursor(row_factory=dict_row) as cur:
        template_rows = cur.execute(SELECT_TEMPLATES).fetchall()
    _init(settings, template_rows)
    thread = threading.Thread(target=writer, name="mailroom-bulk-writer", daemon=True)
    thread.start()
    pool: ProcessPoolExecutor | None = None
    try:
        for index, chunk in enumerate(_chunks(lines, batch_size)):
            if counts.errors:
                break
            if index == POOL_AFTER_BATCHES and jobs > 1:
                pool = ProcessPoolExecutor(
                    max_workers=jobs,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init,
                    initargs=(settings, template_rows),
                )
            batches.put(pool.submit(prepare_chunk, chunk) if pool is not None else prepare_chunk(chunk))
    finally:
        batches.put(None)
        thread.join()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if counts.errors:
        raise counts.errors[0]
    return counts
