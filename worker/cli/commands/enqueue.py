"""`mailroom enqueue`: bulk enqueue of JSON lines, one result line per input line."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Iterator
from typing import IO

import click

from worker.cli.framework import Command, Database, number_option, with_database
from worker.cli.progress import Progress, ReadPosition


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


def _progress(path: str, wanted: bool | None) -> Progress | None:
    """A bar on a terminal by default; lines when --progress asks for it elsewhere; nothing with --no-progress."""
    terminal = sys.stderr.isatty()
    if wanted is False or (wanted is None and not terminal):
        return None
    total = None
    if path != "-":
        with contextlib.suppress(OSError):
            total = os.path.getsize(path)
    return Progress(sys.stderr, "enqueue", total, bar=terminal)


DESCRIPTION = """\
Read JSON lines, one email each (keys: to, to_name, subject, text, html, template, locale, data,
priority, scheduled_for, idempotency_key, campaign_id, headers, max_retries, transactional,
reference_type, reference_id), and print one result line per input line on standard output:
{"line": N, "id": ID} or {"line": N, "error": "...", "field": "..."}. Lines are stored in batches,
each committed on its own: accepted lines stay accepted whatever comes later, and a rejected line
changes nothing. An idempotency_key seen before returns the first email's id.

On a terminal a progress bar is drawn on standard error (share of the file, lines per second, time
left); piped or redirected, nothing but the final count is written there. --progress asks for
progress lines anyway, --no-progress for none. Standard output holds only the result lines.
Exit status 0, 1 when any line was rejected, 2 when the file cannot be read.

Examples:
  mailroom enqueue mail.jsonl > results.jsonl
  echo '{"to": "ada@example.com", "subject": "Hi", "text": "Hello"}' | mailroom enqueue
  mailroom enqueue big.jsonl --batch-size 10000 --jobs 4 --no-progress | jq -c 'select(.error)'"""


@click.command(cls=Command, help=DESCRIPTION)
@click.argument("path", default="-", metavar="[PATH]")
@number_option("--batch-size", default=5000, show_default=True, help="lines per COPY batch and commit")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="progress on standard error (default: a bar when it is a terminal, nothing when piped)",
)
@number_option(
    "--jobs", default=2, show_default=True, help="processes validating a large input (1 = this process only)"
)
@with_database
def enqueue(db: Database, path: str, batch_size: int, progress: bool | None, jobs: int) -> int:
    """`mailroom enqueue [PATH|-]`: JSON lines in, one JSON result line out per input line."""
    from worker.core.bulk import Results, enqueue_lines
    from worker.core.config import ConfigError

    started = time.monotonic()
    out = sys.stdout
    done = 0
    position = ReadPosition()
    bar = _progress(path, progress)

    def emit(results: Results) -> None:
        nonlocal done
        out.write("".join(text + "\n" for _, text in results))
        out.flush()
        done += len(results)
        if bar is not None and results:
            bar.update(done, position.done_through(results[-1][0]))

    try:
        handle = _open_input(path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        lines = position.follow(_numbered_lines(handle))
        counts = enqueue_lines(db.url, lines, db.settings, emit, batch_size, jobs)
    if bar is not None:
        bar.finish(done)
    elapsed = time.monotonic() - started
    click.echo(f"enqueue: {counts.accepted} accepted, {counts.rejected} rejected in {elapsed:.2f}s", err=True)
    return 1 if counts.rejected else 0
