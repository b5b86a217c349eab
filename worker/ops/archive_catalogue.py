"""The archive directory as an operator sees it over years: its files listed, verified, read back, and deleted past retention.

Every archive file covers one period: a UTC day of one final state's email (`emails-…`), or a month
of send logs (`send-logs-…`). `verify` checks a file against the checksum written beside it and
reads every record; `records` yields the records of one address or one period (what `mailroom
archive restore` writes); `expire` deletes files whose period ended more than the archive retention
ago, overwriting their bytes before unlinking them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from worker.ops.archive_files import (
    ARCHIVE_NAME,
    SEND_LOG_NAME,
    ArchiveError,
    checksum_path,
    file_sha256,
    read_archive,
    recorded_sha256,
)

EMAILS = "emails"
SEND_LOGS = "send-logs"
KINDS = (EMAILS, SEND_LOGS)

# The lists of addresses an archived email names besides its recipient.
ADDRESS_LISTS = ("to_extra", "cc", "bcc", "reply_to")


@dataclass(frozen=True)
class ArchiveFile:
    """One archive file: what it holds and the period it covers (`start` inclusive, `end` exclusive)."""

    path: Path
    kind: str
    state: str | None
    period: str
    start: date
    end: date

    @property
    def name(self) -> str:
        return self.path.name


def _next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def describe(path: Path) -> ArchiveFile | None:
    """The archive file `path` names, or None when the name is not an archive file's."""
    if match := ARCHIVE_NAME.match(path.name):
        day = date.fromisoformat(match[2])
        return ArchiveFile(
            path, EMAILS, match[1] or "sent", match[2], day, date.fromordinal(day.toordinal() + 1)
        )
    if match := SEND_LOG_NAME.match(path.name):
        month = date.fromisoformat(match[1] + "-01")
        return ArchiveFile(path, SEND_LOGS, None, match[1], month, _next_month(month))
    return None


def catalogue(directory: Path | None, kinds: tuple[str, ...] = KINDS) -> list[ArchiveFile]:
    """Every archive file of `kinds` in `directory`, by kind then period."""
    if directory is None or not directory.is_dir():
        return []
    found = [f for p in directory.iterdir() if (f := describe(p)) is not None and f.kind in kinds]
    return sorted(found, key=lambda f: (f.kind, f.start, f.name))


def period_bounds(period: str) -> tuple[date, date]:
    """`YYYY`, `YYYY-MM` or `YYYY-MM-DD` as (first day, day after the last); ValueError otherwise."""
    parts = period.split("-")
    if len(parts) == 1 and len(parts[0]) == 4:
        year = int(parts[0])
        return date(year, 1, 1), date(year + 1, 1, 1)
    if len(parts) == 2 and len(parts[0]) == 4 and len(parts[1]) == 2:
        month = date(int(parts[0]), int(parts[1]), 1)
        return month, _next_month(month)
    day = date.fromisoformat(period) if len(parts) == 3 and len(period) == 10 else None
    if day is None:
        raise ValueError(f"{period!r} is not a period: give YYYY, YYYY-MM or YYYY-MM-DD")
    return day, date.fromordinal(day.toordinal() + 1)


def overlapping(files: list[ArchiveFile], start: date, end: date) -> list[ArchiveFile]:
    """The files whose period overlaps [start, end)."""
    return [f for f in files if f.start < end and start < f.end]


@dataclass
class FileCheck:
    """What `verify` found in one file: its records, its checksum's standing, and any problem."""

    file: ArchiveFile
    records: int = 0
    checksum: str = "ok"  # ok, missing, mismatch
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(file: ArchiveFile) -> FileCheck:
    """Check `file` against its checksum and read every record; problems are listed, never raised."""
    check = FileCheck(file)
    try:
        recorded = recorded_sha256(file.path)
        if recorded is None:
            check.checksum = "missing"
            check.problems.append(
                f"no {checksum_path(file.path).name} (written before checksums, or removed)"
            )
        elif recorded != file_sha256(file.path):
            check.checksum = "mismatch"
            check.problems.append("its bytes do not match the checksum written with it")
        # Send logs are written in id order, so a month of millions is checked in constant memory.
        seen: set[int] = set()
        last = 0
        for record_id, _ in read_archive(file.path):
            if record_id in seen or (file.kind == SEND_LOGS and record_id <= last):
                check.problems.append(f"record {record_id} is held twice or out of order")
                break
            if file.kind == SEND_LOGS:
                last = record_id
            else:
                seen.add(record_id)
            check.records += 1
    except (ArchiveError, OSError) as exc:
        check.problems.append(str(exc))
    return check


def addresses(record: dict[str, Any]) -> set[str]:
    """Every address an archived record names, in lower case (an email's lists; a send log's recipient)."""
    found = {str(record.get("recipient_email", "")).lower()}
    for key in ADDRESS_LISTS:
        found.update(str(a).lower() for a in record.get(key) or ())
    return found


def record_for(line: str, addr: str) -> dict[str, Any] | None:
    """The record of `line` when it names `addr` (lower case), else None."""
    if addr not in line.lower():  # cheap test first: most lines of most files are someone else's
        return None
    record: dict[str, Any] = json.loads(line)
    return record if addr in addresses(record) else None


def records(
    files: list[ArchiveFile],
    *,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[tuple[ArchiveFile, dict[str, Any]]]:
    """Yield (file, record) of every record of `files`, or only those naming `address` (lower case).

    A file whose checksum does not match is an `ArchiveError` before any of its records is read.
    """
    for done, file in enumerate(files, start=1):
        recorded = recorded_sha256(file.path)
        if recorded is not None and recorded != file_sha256(file.path):
            raise ArchiveError(
                f"{file.path} does not match its checksum; `mailroom archive verify` says more"
            )
        for _, line in read_archive(file.path):
            if address is None:
                yield file, json.loads(line)
            elif (record := record_for(line, address)) is not None:
                yield file, record
        if progress:
            progress(done, len(files))


def expired(files: list[ArchiveFile], before: date) -> list[ArchiveFile]:
    """The files whose period ended on or before `before`."""
    return [f for f in files if f.end <= before]


def shred(path: Path) -> None:
    """Overwrite a file's bytes with zeros, sync, then unlink it (and its checksum file).

    This leaves nothing readable on a filesystem that writes in place (ext4, XFS). On copy-on-write
    filesystems, SSDs that remap blocks, and snapshots, old blocks may survive any overwrite: keep
    the archive directory on an encrypted volume (see docs/operations.md).
    """
    for target in (path, checksum_path(path)):
        try:
            fd = os.open(target, os.O_WRONLY)
        except FileNotFoundError:
            continue
        try:
            size = os.fstat(fd).st_size
            zeros = bytes(min(size, 1 << 20))
            left = size
            while left > 0:
                left -= os.write(fd, zeros[: min(left, len(zeros))])
            os.fsync(fd)
            os.ftruncate(fd, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        target.unlink()
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
