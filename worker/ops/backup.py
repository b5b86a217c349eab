"""Backup and restore of the `mailroom` schema with PostgreSQL's own tools, of the server's major version.

`backup` writes a custom-format `pg_dump` of the schema (tables, data, functions, the lot) to a
temporary file beside the target, readable by its owner only, and renames it into place once
pg_dump succeeded, so a failed or interrupted backup never leaves a truncated file under the
name. `restore` loads such a file into a database that has no `mailroom` schema yet, in one
transaction: it works completely or changes nothing. Secrets stay encrypted as they were (the
same `MAILROOM_SECRET_KEY` reads them), and the signature chain is restored byte for byte.
Neither tool sees the database password on its command line (see `pgtools.tool_connection`).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg

from worker.core.config import ConfigError
from worker.core.pgtools import client_tool, server_major, tool_connection
from worker.core.schema import SCHEMA


class BackupError(RuntimeError):
    """pg_dump or pg_restore failed, or the target is not fit; the message says why."""


@dataclass(frozen=True)
class BackupResult:
    """What was written or read."""

    path: Path
    bytes: int
    server_major: int
    tool: Path


def backup(url: str, path: Path) -> BackupResult:
    """Dump the `mailroom` schema of the database at `url` to `path` (custom format, mode 0600)."""
    major = server_major(url)
    pg_dump = client_tool("pg_dump", major)
    path = path.expanduser().resolve()
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write {path}: {path.parent} is not a directory")
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("wb") as out, tool_connection(url) as tool:
        os.fchmod(out.fileno(), 0o600)
        done = subprocess.run(
            [str(pg_dump), "--format=custom", f"--schema={SCHEMA}", "--no-owner", "--dbname", tool.dsn],
            stdout=out,
            stderr=subprocess.PIPE,
            env=tool.env,
            check=False,
        )
        out.flush()
        os.fsync(out.fileno())
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BackupError(f"pg_dump failed: {_first_line(done.stderr)}")
    partial.replace(path)
    return BackupResult(path, path.stat().st_size, major, pg_dump)


def restore(url: str, path: Path) -> BackupResult:
    """Load a backup into the database at `url`, which must not hold a `mailroom` schema yet."""
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"no backup file at {path}")
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (SCHEMA,)).fetchone()
        if row and row[0]:
            raise BackupError(
                f"the database already has a {SCHEMA} schema; restore into an empty database"
                " (createdb a new one, or drop the schema first if you mean to replace it)"
            )
    major = server_major(url)
    pg_restore = client_tool("pg_restore", major)
    with tool_connection(url) as tool:
        done = subprocess.run(
            [
                str(pg_restore),
                "--no-owner",
                "--single-transaction",
                "--exit-on-error",
                "--dbname",
                tool.dsn,
                str(path),
            ],
            capture_output=True,
            env=tool.env,
            check=False,
        )
    if done.returncode != 0:
        raise BackupError(f"pg_restore failed (nothing was restored): {_first_line(done.stderr)}")
    return BackupResult(path, path.stat().st_size, major, pg_restore)


def _first_line(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    return text.splitlines()[0] if text else "no message"
