"""Backup and restore of the `mailroom` schema with PostgreSQL's own tools, of the server's major version.

`backup` writes a custom-format `pg_dump` of the schema (tables, data, functions, the lot), encrypted
as it streams out of pg_dump when given a key (`worker.ops.backup_crypto`: AES-256-GCM chunks under a
key derived from MAILROOM_SECRET_KEY or a backup key file), to a temporary file beside the target,
readable by its owner only, and renames it into place once pg_dump succeeded, so a failed or
interrupted backup never leaves a file under the name. `restore` loads a backup into a database that
has no `mailroom` schema yet, in one transaction: it works completely or changes nothing. An
encrypted backup is decrypted whole into a private temporary file first, so pg_restore starts only
once every chunk authenticated (a wrong key, a damaged, truncated or extended file restore nothing).
Secrets stay encrypted as they were (the same `MAILROOM_SECRET_KEY` reads them), and the signature
chain is restored byte for byte. Neither tool sees the database password on its command line (see
`pgtools.tool_connection`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

import psycopg

from worker.core.config import ConfigError, Settings
from worker.core.crypto import read_key_file, secret_key
from worker.core.pgtools import ToolConnection, client_tool, server_major, tool_connection
from worker.core.schema import SCHEMA
from worker.ops.backup_crypto import (
    HEADER_SIZE,
    MAGIC,
    PG_DUMP_MAGIC,
    BackupKey,
    KeySource,
    SealError,
    decrypt_stream,
    encrypt_stream,
    parse_header,
    read_full,
)

ROTATED = re.compile(r"^mailroom-\d{8}T\d{6}Z\.dump$")  # what `backup_into` writes and prunes, nothing else


class BackupError(RuntimeError):
    """pg_dump or pg_restore failed, or the target or the file is not fit; the message says why."""


@dataclass(frozen=True)
class BackupResult:
    """What was written or read."""

    path: Path
    bytes: int
    server_major: int
    tool: Path
    key: BackupKey | None = None  # the key it is encrypted with; None for a plain pg_dump


# --- keys -------------------------------------------------------------------------------------------


def backup_key(settings: Settings, key_file: Path | None, *, make: bool | None, otherwise: str) -> BackupKey:
    """The key to encrypt or decrypt with: the backup key file when given, else MAILROOM_SECRET_KEY.

    `make` as `crypto.secret_key` (None: made at first need on the embedded database); `otherwise` is
    the way out the error names when there is no key (`--no-encrypt`, `--no-snapshot`)."""
    if key_file is not None:
        return _from_text(read_key_file(key_file, "backup key file"), KeySource.KEY_FILE)
    try:
        text = secret_key(settings, make=make)
    except ConfigError:
        raise ConfigError(
            "MAILROOM_SECRET_KEY is not set, and an encrypted backup's key is derived from it: export it,"
            f" or give a backup key file with --key-file PATH (`mailroom keys generate`), or {otherwise}"
        ) from None
    return _from_text(text, KeySource.SECRET_KEY)


def _from_text(text: str, source: KeySource) -> BackupKey:
    try:
        return BackupKey.from_text(text, source)
    except SealError as exc:
        raise ConfigError(str(exc)) from None


def restore_key(path: Path, settings: Settings, key_file: Path | None) -> BackupKey | None:
    """The key that opens the backup at `path`: None for a plain pg_dump; a key file's when it was made
    with one (asked for when not given), else MAILROOM_SECRET_KEY's (never made here)."""
    path = _existing(path)
    if not _encrypted(path):
        return None
    with path.open("rb") as sealed:
        try:
            header = parse_header(read_full(sealed, HEADER_SIZE))
        except SealError as exc:
            raise BackupError(f"cannot open {path}: {exc}") from None
    if header.source is KeySource.KEY_FILE and key_file is None:
        raise ConfigError(f"{path} was encrypted with a backup key file: give it with --key-file PATH")
    return backup_key(settings, key_file, make=False, otherwise="restore it where the key is")


# --- writing ----------------------------------------------------------------------------------------


def backup(url: str, path: Path, key: BackupKey | None = None) -> BackupResult:
    """Dump the `mailroom` schema of the database at `url` to `path` (custom format, mode 0600),
    encrypted with `key` when given."""
    major = server_major(url)
    pg_dump = client_tool("pg_dump", major)
    path = path.expanduser().resolve()
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write {path}: {path.parent} is not a directory")
    partial = path.with_name(f".{path.name}.partial")
    argv = [str(pg_dump), "--format=custom", f"--schema={SCHEMA}", "--no-owner"]
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out, tool_connection(url) as tool:
            os.fchmod(out.fileno(), 0o600)  # a partial file left by an older run keeps its mode otherwise
            code, stderr = _run_pg_dump([*argv, "--dbname", tool.dsn], tool, out, key)
            out.flush()
            os.fsync(out.fileno())
        if code != 0:
            raise BackupError(f"pg_dump failed: {_first_line(stderr)}")
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)  # failed or interrupted (Ctrl-C): nothing under the name, no leftover
        raise
    return BackupResult(path, path.stat().st_size, major, pg_dump, key)


def _run_pg_dump(
    argv: list[str], tool: ToolConnection, out: IO[bytes], key: BackupKey | None
) -> tuple[int, bytes]:
    """Run pg_dump into `out`, through the encryption when there is a key; its exit status and messages."""
    if key is None:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, env=tool.env, check=False)
        return done.returncode, done.stderr
    # Its messages go to a file, not a pipe nobody reads while the dump streams (a full pipe would stall it).
    with tempfile.TemporaryFile() as errors:
        dump = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, env=tool.env)
        assert dump.stdout is not None
        try:
            encrypt_stream(dump.stdout, out, key)
        finally:
            dump.stdout.close()  # pg_dump, if still writing, stops on the closed pipe
            code = dump.wait()
        errors.seek(0)
        return code, errors.read()


def stamp(moment: datetime) -> str:
    """A UTC moment as backups' names carry it: 20260314T021500Z."""
    return moment.strftime("%Y%m%dT%H%M%SZ")


def backup_into(
    url: str, directory: Path, key: BackupKey | None, *, keep: int | None, now: datetime
) -> tuple[BackupResult, list[Path]]:
    """Write `mailroom-<UTC time>.dump` in `directory` (made 0700 if missing); then, with `keep`, remove the
    oldest such files beyond the newest `keep`. Returns the backup and the files removed."""
    directory = directory.expanduser()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    result = backup(url, directory / f"mailroom-{stamp(now)}.dump", key)
    if keep is None:
        return result, []
    rotated = sorted(p for p in directory.iterdir() if ROTATED.match(p.name) and p.is_file())
    removed = rotated[: max(len(rotated) - keep, 0)]
    for old in removed:
        old.unlink()
    return result, removed


def snapshot(
    url: str, directory: Path, key: BackupKey, *, from_revision: str, to_revision: str, now: datetime
) -> BackupResult:
    """The encrypted backup taken before an upgrade: `before-<from>-to-<to>-<UTC time>.dump` in
    `directory` (made 0700 if missing)."""
    directory = directory.expanduser()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = f"before-{from_revision}-to-{to_revision}-{stamp(now)}.dump"
    return backup(url, directory / name, key)


# --- reading ----------------------------------------------------------------------------------------


def _existing(path: Path) -> Path:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"no backup file at {path}")
    return path


def _encrypted(path: Path) -> bool:
    """Whether `path` is an encrypted backup (True) or a custom-format pg_dump (False); neither is refused."""
    with path.open("rb") as handle:
        start = handle.read(len(MAGIC))
    if start.startswith(MAGIC):
        return True
    if start.startswith(PG_DUMP_MAGIC):
        return False
    raise BackupError(f"{path} is neither an encrypted Mailroom backup nor a custom-format pg_dump")


@contextlib.contextmanager
def opened(path: Path, key: BackupKey | None, *, refused: str) -> Iterator[Path]:
    """The plain pg_dump of the backup at `path`: the file itself, or its whole content decrypted into a
    0600 file in a private temporary directory, removed with it afterwards.

    A backup that does not decrypt whole (wrong key, damaged, truncated, extended) is refused with
    `BackupError`, its message ending with `refused` (what did not happen), before anything is yielded."""
    path = _existing(path)
    if not _encrypted(path):
        yield path
        return
    if key is None:
        raise BackupError(f"{path} is encrypted and no key was given; {refused}")
    with tempfile.TemporaryDirectory(prefix="mailroom-restore-") as private:  # created 0700
        plain = Path(private) / "backup.dump"
        fd = os.open(plain, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out, path.open("rb") as sealed:
            try:
                decrypt_stream(sealed, out, key)
            except SealError as exc:
                raise BackupError(f"cannot open {path}: {exc}; {refused}") from None
        yield plain


def has_schema(url: str) -> bool:
    """Whether the database at `url` holds a `mailroom` schema."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (SCHEMA,)).fetchone()
    return bool(row and row[0])


def restore(url: str, path: Path, key: BackupKey | None = None) -> BackupResult:
    """Load a backup into the database at `url`, which must not hold a `mailroom` schema yet; an encrypted
    one is opened with `key` (see `restore_key`)."""
    path = _existing(path)
    if has_schema(url):
        raise BackupError(
            f"the database already has a {SCHEMA} schema; restore into an empty database"
            " (createdb a new one, or drop the schema first if you mean to replace it)"
        )
    major = server_major(url)
    pg_restore = client_tool("pg_restore", major)
    with opened(path, key, refused="nothing was restored") as dump:
        load(url, dump, pg_restore)
    return BackupResult(path, path.stat().st_size, major, pg_restore, key)


def load(url: str, dump: Path, pg_restore: Path) -> None:
    """pg_restore a plain custom-format dump into `url` in one transaction: all of it or nothing."""
    with tool_connection(url) as tool:
        done = subprocess.run(
            [
                str(pg_restore),
                "--no-owner",
                "--single-transaction",
                "--exit-on-error",
                "--dbname",
                tool.dsn,
                str(dump),
            ],
            capture_output=True,
            env=tool.env,
            check=False,
        )
    if done.returncode != 0:
        raise BackupError(f"pg_restore failed (nothing was restored): {_first_line(done.stderr)}")


def _first_line(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    return text.splitlines()[0] if text else "no message"
