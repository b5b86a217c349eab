"""Bulk enqueue of JSON lines: validation on this thread, COPY on a writer thread, results in input order."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from worker.config import Settings
from worker.outbox import insert_batch, load_catalog, parse_line, prepare
from worker.validation import ValidationError

# (line number, JSON result text) in input order
Results = list[tuple[int, str]]


@dataclass
class BulkCounts:
    """How a bulk load went."""

    accepted: int = 0
    rejected: int = 0
    errors: list[BaseException] = field(default_factory=list)


def _error_line(number: int, exc: ValidationError) -> str:
    import json

    return json.dumps({"line": number, "error": str(exc), "field": exc.field})


def enqueue_lines(
    url: str,
    lines: Iterable[tuple[int, str]],
    settings: Settings,
    emit: Callable[[Results], None],
    batch_size: int = 5000,
) -> BulkCounts:
    """Validate and store numbered JSON lines; `emit` receives each batch's results once it is committed.

    Each batch commits on its own, so accepted lines stay accepted whatever comes later. While
    one batch is copied into PostgreSQL, the next is being validated.
    """
    counts = BulkCounts()
    batches: queue.Queue[tuple[list[tuple[int, Any]], Results] | None] = queue.Queue(maxsize=2)

    def writer() -> None:
        try:
            with psycopg.connect(url) as conn:
                while (batch := batches.get()) is not None:
                    rows, rejected = batch
                    ids = insert_batch(conn, [row for _, row in rows])
                    done = rejected + [
                        (n, f'{{"line": {n}, "id": {i}}}') for (n, _), i in zip(rows, ids, strict=True)
                    ]
                    done.sort(key=lambda item: item[0])
                    emit(done)
                    counts.accepted += len(ids)
        except BaseException as exc:  # surfaced to the caller below
            counts.errors.append(exc)
            while batches.get() is not None:
                pass

    thread = threading.Thread(target=writer, name="mailroom-bulk-writer", daemon=True)
    with psycopg.connect(url) as conn:
        catalog = load_catalog(conn, settings)
    thread.start()
    rows: list[tuple[int, Any]] = []
    rejected: Results = []
    try:
        for number, text in lines:
            try:
                rows.append((number, prepare(parse_line(text), catalog, settings, created_by="cli")))
            except ValidationError as exc:
                rejected.append((number, _error_line(number, exc)))
                counts.rejected += 1
            if len(rows) + len(rejected) >= batch_size:
                batches.put((rows, rejected))
                rows, rejected = [], []
                if counts.errors:
                    break
        if not counts.errors:
            batches.put((rows, rejected))
    finally:
        batches.put(None)
        thread.join()
    if counts.errors:
        raise counts.errors[0]
    return counts
