"""`mailroom enqueue`: bulk enqueue of JSON lines, one result line per input line."""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from worker.core.config import ConfigError, Settings


def _url(settings: Settings) -> str:
    from worker.core.db import checked_url

    return checked_url(settings)


def _open_input(path: str) -> IO[str]:
    # Invalid UTF-8 in one line must not stop the others: bad bytes become lone surrogates, which the
    # line's decoding reports as that line's error.
    if path == "-":
        buffer = getattr(sys.stdin, "buffer", None)
        if buffer is None:  # already text (an embedding program's stream)
            return sys.stdin
        return io.TextIOWrapper(buffer, encoding="utf-8", errors="surrogateescape")
    return open(path, encoding="utf-8", errors="surrogateescape")


def _numbered_lines(handle: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(handle, start=1):
        if line.strip():
            yield number, line


def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom enqueue [PATH|-]`: JSON lines in, one JSON result line out per input line."""
    from worker.core.bulk import Results, enqueue_lines

    url = _url(settings)
    started = time.monotonic()
    out = sys.stdout
    done = 0

    def emit(results: Results) -> None:
        nonlocal done
        out.write("".join(text + "\n" for _, text in results))
        out.flush()
        done += len(results)
        if args.progress:
            rate = done / max(time.monotonic() - started, 1e-9)
            print(f"enqueue: {done} lines done ({rate:,.0f} lines/s)", file=sys.stderr, flush=True)

    try:
        handle = _open_input(args.path)
    except OSError as exc:
        raise ConfigError(f"cannot read {args.path}: {exc.strerror}") from None
    with handle:
        counts = enqueue_lines(url, _numbered_lines(handle), settings, emit, args.batch_size, args.jobs)
    elapsed = time.monotonic() - started
    print(
        f"enqueue: {counts.accepted} accepted, {counts.rejected} rejected in {elapsed:.2f}s", file=sys.stderr
    )
    return 1 if counts.rejected else 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom enqueue`."""
    enq = sub.add_parser(
        "enqueue",
        help="enqueue email from JSON lines",
        description="Read JSON lines (keys: to, to_name, subject, text, html, template, locale, data, priority, "
        "scheduled_for, idempotency_key, campaign_id, headers, max_retries, transactional, reference_type, "
        'reference_id) and print one line per input: {"line": N, "id": ID} or {"line": N, "error": "..."}. '
        "Accepted lines stay accepted; the exit status is 1 when any line was rejected.",
    )
    enq.add_argument("path", nargs="?", default="-", help="file to read, or - for standard input (default)")
    enq.add_argument(
        "--batch-size", type=int, default=5000, help="lines per COPY batch and commit (default 5000)"
    )
    enq.add_argument("--progress", action="store_true", help="report progress on stderr after each batch")
    enq.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="processes validating a large input (default 2; 1 = this process only)",
    )
    enq.set_defaults(handler=cmd_enqueue)
