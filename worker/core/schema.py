"""The whole `mailroom` schema as one readable SQL file, and the live database's schema to compare with it.

`migrations/schema.sql` is what every revision together leaves behind: tables, indexes, functions,
triggers, grants and partitioned parents, as pg_dump prints them with noise removed (session
settings, owners, the per-dump `\\restrict` key and the month partitions, whose names follow the
calendar). The migrations stay the only way the schema changes; this file is how a reader sees
all of it, and the tests fail when the two disagree.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

from worker.core.pgtools import client_tool, server_major, tool_connection

SCHEMA = "mailroom"
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "migrations" / "schema.sql"
# Month partitions (send_logs_2026_11, ...) are made ahead by maintenance; only their parents count.
_MONTH_PARTITIONS = f"{SCHEMA}.*_[0-9][0-9][0-9][0-9]_[0-9][0-9]"
_NOISE = re.compile(r"^(SET |SELECT pg_catalog\.set_config|\\restrict |\\unrestrict |-- Dumped (from|by) )")
HEADER = (
    "-- The whole mailroom schema as the migrations leave it (generated; do not edit).\n"
    "-- Regenerate after adding a revision: python -m worker.core.schema > migrations/schema.sql\n"
)


def normalise(dump: str) -> str:
    """pg_dump's schema output without the lines that vary between runs, servers or months."""
    lines = [line for line in dump.splitlines() if not _NOISE.match(line)]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return HEADER + "\n" + text + "\n"


def dump_schema(url: str) -> str:
    """The live `mailroom` schema of the database at `url`, normalised like `migrations/schema.sql`."""
    pg_dump = client_tool("pg_dump", server_major(url))
    with tool_connection(url) as tool:  # the password in a private file, never in argv
        done = subprocess.run(
            [str(pg_dump), "--schema-only", "--no-owner", f"--schema={SCHEMA}",
             f"--exclude-table={_MONTH_PARTITIONS}", "--dbname", tool.dsn],
            capture_output=True, text=True, env=tool.env, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"pg_dump failed: {done.stderr.strip()}")
    return normalise(done.stdout)


def schema_diff(url: str, expected: Path = SCHEMA_FILE) -> list[str]:
    """The differences between the live schema and the file, as unified-diff lines (empty: identical)."""
    live = dump_schema(url).splitlines(keepends=True)
    want = expected.read_text(encoding="utf-8").splitlines(keepends=True)
    return list(difflib.unified_diff(want, live, fromfile=str(expected.name), tofile="live database"))


def main() -> int:
    """Print the live schema of the configured database (the embedded one by default)."""
    from worker.core.config import Settings
    from worker.core.db import database_url

    sys.stdout.write(dump_schema(database_url(Settings.from_env())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
