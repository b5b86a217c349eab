"""The archive files of retention: one gzip JSON-lines file per final state and UTC day, written atomically, read back, locked.

Sent email goes to `emails-YYYY-MM-DD.jsonl.gz` (the name it always had); the other final states to
`emails-<state>-YYYY-MM-DD.jsonl.gz` (failed, expired, cancelled, suppressed), so every archive
file of every state starts with `emails-` and each state's files are written independently.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

from worker.core.config import Settings

if sys.platform != "win32":
    import fcntl

log = logging.getLogger(__name__)


COMPRESS_LEVEL = 6
ARCHIVE_NAME = re.compile(
    r"^emails-(?:(bounced|failed|expired|cancelled|suppressed)-)?(\d{4}-\d{2}-\d{2})\.jsonl\.gz$"
)


class ArchiveError(RuntimeError):
    """An archive file cannot be trusted; nothing of its day is deleted until an operator looks at it."""


def archive_directory(settings: Settings) -> Path:
    """`MAILROOM_ARCHIVE_DIR`, or `$MAILROOM_HOME/archive`."""
    return settings.archive_dir or settings.home / "archive"


def archive_path(directory: Path, day: date, state: str = "sent") -> Path:
    """The archive file of one final state's email of one UTC day."""
    prefix = "emails" if state == "sent" else f"emails-{state}"
    return directory / f"{prefix}-{day.isoformat()}.jsonl.gz"


def read_archive(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (email id, JSON line) of every record in an archive file; a damaged file raises `ArchiveError`."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    record = json.loads(line)
                    email_id = int(record["id"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise ArchiveError(f"{path}: line {number} is not an archived email ({exc})") from None
                yield email_id, line if line.endswith("\n") else line + "\n"
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{path} is unreadable ({exc}); move it aside to archive that day again") from None


@contextlib.contextmanager
def directory_lock(directory: Path, *, wait: bool) -> Iterator[None]:
    """Hold an exclusive lock on the archive directory: one process rewrites its files at a time.

    Processes of one database already take turns through the maintenance advisory lock; this lock
    also covers several databases (or installs) configured with the same directory, whose runs
    would otherwise replace each other's files. Without `wait`, a held lock is an `ArchiveError`.
    On Windows (no `flock`) nothing is locked.
    """
    if sys.platform == "win32":
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise ArchiveError(
                f"{directory} is being written by another process (the maintenance of another database"
                " using the same directory?); the next run archives this day"
            ) from None
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _open_private(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)


def write_archive_atomically(
    path: Path, lines: Iterator[str], before_rename: Callable[[], None] | None = None
) -> int:
    """Write `lines` gzip-compressed to `path` via a synced temporary file and a rename; return the count.

    Until the rename, `path` keeps its previous content; a failure removes the temporary file.
    """
    tmp = path.with_name(path.name + ".tmp")
    written = 0
    try:
        with os.fdopen(_open_private(tmp), "wb") as raw:
            with gzip.GzipFile(
                filename=path.name, mode="wb", fileobj=raw, mtime=0, compresslevel=COMPRESS_LEVEL
            ) as out:
                for line in lines:
                    out.write(line.encode("utf-8"))
                    written += 1
            raw.flush()
            os.fsync(raw.fileno())
        if before_rename:
            before_rename()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    _sync_directory(path.parent)
    return written


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
