"""The archive files of retention: gzip JSON-lines files, one per period, written atomically, checksummed, read back, locked.

Sent email goes to `emails-YYYY-MM-DD.jsonl.gz` (the name it always had); the other final states to
`emails-<state>-YYYY-MM-DD.jsonl.gz` (failed, expired, cancelled, suppressed), so every archive
file of every state starts with `emails-` and each state's files are written independently. Send
logs go to `send-logs-YYYY-MM.jsonl.gz`, one per month, as their partitions are dropped.

Every file has a `<name>.sha256` beside it (the `sha256sum` format: `sha256sum -c` checks it),
written with the file; `mailroom archive verify` checks both.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, BinaryIO

from worker.core.config import Settings

if sys.platform != "win32":
    import fcntl

log = logging.getLogger(__name__)


COMPRESS_LEVEL = 6
ARCHIVE_NAME = re.compile(
    r"^emails-(?:(bounced|failed|expired|cancelled|suppressed)-)?(\d{4}-\d{2}-\d{2})\.jsonl\.gz$"
)
SEND_LOG_NAME = re.compile(r"^send-logs-(\d{4}-\d{2})\.jsonl\.gz$")
CHECKSUM_SUFFIX = ".sha256"


class ArchiveError(RuntimeError):
    """An archive file cannot be trusted; nothing of its day is deleted until an operator looks at it."""


def archive_directory(settings: Settings) -> Path:
    """`MAILROOM_ARCHIVE_DIR`, or `$MAILROOM_HOME/archive`."""
    return settings.archive_dir or settings.home / "archive"


def archive_path(directory: Path, day: date, state: str = "sent") -> Path:
    """The archive file of one final state's email of one UTC day."""
    prefix = "emails" if state == "sent" else f"emails-{state}"
    return directory / f"{prefix}-{day.isoformat()}.jsonl.gz"


def day_start(day: date) -> datetime:
    """Midnight UTC at the start of `day`."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def send_log_path(directory: Path, month: date) -> Path:
    """The archive file of one month's send logs."""
    return directory / f"send-logs-{month:%Y-%m}.jsonl.gz"


def checksum_path(path: Path) -> Path:
    """The `sha256sum`-format file that holds the checksum of archive file `path`."""
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def recorded_sha256(path: Path) -> str | None:
    """The checksum written beside `path`, or None when there is none (a file from before checksums)."""
    try:
        text = checksum_path(path).read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{checksum_path(path)} is unreadable ({exc})") from None
    digest, _, name = text.strip().partition("  ")
    if name != path.name or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ArchiveError(f"{checksum_path(path)} is not a checksum of {path.name}")
    return digest


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


class _Hashing(io.RawIOBase):
    """A write-only file that hashes every byte on its way to `raw`."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self.raw.write(view)
        return len(view)


def write_archive_atomically(
    path: Path, lines: Iterator[str], before_rename: Callable[[], None] | None = None
) -> int:
    """Write `lines` gzip-compressed to `path` via a synced temporary file and a rename; return the count.

    Until the rename, `path` keeps its previous content; a failure removes the temporary file. Its
    checksum file is written beside it the same way and renamed just after it: a run killed between
    the two renames leaves a stale checksum, which `mailroom archive verify` reports (and the file's
    next rewrite mends).
    """
    tmp = path.with_name(path.name + ".tmp")
    sums = checksum_path(path)
    sums_tmp = sums.with_name(sums.name + ".tmp")
    written = 0
    try:
        with os.fdopen(_open_private(tmp), "wb") as raw:
            hashing = _Hashing(raw)
            with gzip.GzipFile(
                filename=path.name, mode="wb", fileobj=hashing, mtime=0, compresslevel=COMPRESS_LEVEL
            ) as out:
                for line in lines:
                    out.write(line.encode("utf-8"))
                    written += 1
            raw.flush()
            os.fsync(raw.fileno())
        with os.fdopen(_open_private(sums_tmp), "w", encoding="ascii") as text:
            text.write(f"{hashing.digest.hexdigest()}  {path.name}\n")
            text.flush()
            os.fsync(text.fileno())
        if before_rename:
            before_rename()
    except BaseException:
        tmp.unlink(missing_ok=True)
        sums_tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    os.replace(sums_tmp, sums)
    _sync_directory(path.parent)
    return written


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
