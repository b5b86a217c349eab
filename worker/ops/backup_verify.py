"""A restore drill: a backup restored into a scratch database on the same server, checked, then dropped.

`verify` opens the backup (an encrypted one authenticates whole first, as `backup.restore` does),
creates `mailroom_verify_<random>` from template0, pg_restores into it in one transaction, and checks
what came back: the Alembic revision is one this Mailroom knows, every table is counted, the audit
trail's hash chain verifies (`audit_chain.verify_chain`, where the revision has one), and every stored
secret decrypts with the secret key in use (when one is given): a backup whose SMTP passwords and
signing secrets the key at hand cannot read restores a Mailroom that cannot send. The scratch
database is dropped whatever happened, Ctrl-C included. The role needs CREATEDB.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from worker.core.config import ConfigError
from worker.core.crypto import SecretBox
from worker.core.db import head_revision
from worker.core.pgtools import client_tool, server_major
from worker.core.schema import SCHEMA
from worker.ops.audit_chain import verify_chain
from worker.ops.backup import BackupError, load, opened
from worker.ops.backup_crypto import BackupKey
from worker.ops.keys import unreadable_secrets

SCRATCH_PREFIX = "mailroom_verify_"

MAY_CREATE_DATABASES = (
    "SELECT current_user, rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
)
# Tables, partitioned parents counted whole (their partitions are not listed again).
TABLES = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname
"""
HAS_TABLE = "SELECT to_regclass(%s) IS NOT NULL"
REVISION = "SELECT version_num FROM mailroom.alembic_version"


@dataclass(frozen=True)
class Check:
    """One thing verified, and whether it held."""

    ok: bool
    text: str


@dataclass
class Verification:
    """What a drill found: the scratch database it used, its checks and each table's rows."""

    database: str
    checks: list[Check] = field(default_factory=list)
    tables: list[tuple[str, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check held."""
        return bool(self.checks) and all(check.ok for check in self.checks)


def _silent(line: str) -> None:
    """Say nothing."""


def verify(
    url: str,
    path: Path,
    key: BackupKey | None,
    *,
    secrets_box: SecretBox | None = None,
    say: Callable[[str], None] = _silent,
) -> Verification:
    """Restore the backup at `path` into a scratch database on the server of `url`, check it, drop it;
    `secrets_box` (the secret key in use), when given, must decrypt every stored secret. `say` hears
    each long step as it starts."""
    pg_restore = client_tool("pg_restore", server_major(url))
    _require_createdb(url)
    drill = Verification(f"{SCRATCH_PREFIX}{secrets.token_hex(6)}")
    say(f"opening {path} ...")
    try:
        with opened(path, key, refused="nothing was verified") as dump:
            drill.checks.append(Check(True, _opened(key)))
            _drill(url, dump, pg_restore, drill, secrets_box, say)
    except BackupError as exc:
        drill.checks.append(Check(False, str(exc)))
    return drill


def _opened(key: BackupKey | None) -> str:
    if key is None:
        return "opens: a plain pg_dump (not encrypted)"
    return f"opens: every chunk authenticates with {key.source.described} (key id {key.shown})"


def _drill(
    url: str,
    dump: Path,
    pg_restore: Path,
    drill: Verification,
    secrets_box: SecretBox | None,
    say: Callable[[str], None],
) -> None:
    """Restore into the scratch database and check it; the database is dropped in every case."""
    scratch = make_conninfo(url, dbname=drill.database)
    try:
        say(f"restoring into scratch database {drill.database} ...")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(drill.database))
            )
        load(scratch, dump, pg_restore)
        drill.checks.append(Check(True, "restores: pg_restore loaded it in one transaction"))
        say("checking the restored database ...")
        with psycopg.connect(scratch) as conn:
            _check(conn, drill, say)
            drill.checks.append(_secrets(conn, secrets_box))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(drill.database))
            )
        say(f"dropped scratch database {drill.database}")


def _require_createdb(url: str) -> None:
    with psycopg.connect(url) as conn:
        row = conn.execute(MAY_CREATE_DATABASES).fetchone()
    if row is not None and not row[1]:
        raise ConfigError(
            f"verifying restores the backup into a scratch database, and role {row[0]} may not create"
            f" databases: grant it CREATEDB (ALTER ROLE {row[0]} CREATEDB) or verify as a role that has it"
        )


def _check(conn: psycopg.Connection[Any], drill: Verification, say: Callable[[str], None]) -> None:
    drill.checks.append(_revision(conn))
    for (table,) in conn.execute(TABLES, (SCHEMA,)).fetchall():
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(table))
        ).fetchone()
        drill.tables.append((str(table), int(row[0]) if row else 0))
    rows = sum(count for _, count in drill.tables)
    drill.checks.append(
        Check(bool(drill.tables), f"tables: {len(drill.tables)} counted, {rows:,} rows in all")
    )
    conn.commit()
    drill.checks.append(_audit(conn, say))


def _revision(conn: psycopg.Connection[Any]) -> Check:
    """The Alembic revision is there and this Mailroom knows it."""
    present = conn.execute(HAS_TABLE, (f"{SCHEMA}.alembic_version",)).fetchone()
    row = conn.execute(REVISION).fetchone() if present and present[0] else None
    if row is None:
        return Check(False, "revision: none recorded (mailroom.alembic_version is missing or empty)")
    revision, head = str(row[0]), head_revision()
    if revision == head:
        return Check(True, f"revision: {revision}, the newest this Mailroom knows")
    if revision in shipped_revisions():
        return Check(
            True, f"revision: {revision}, older than this Mailroom's {head} (`db upgrade` after a restore)"
        )
    return Check(
        False, f"revision: {revision} is unknown to this Mailroom (newest {head}): made by a newer version?"
    )


def shipped_revisions() -> set[str]:
    """Every revision this Mailroom's migrations hold, as Alembic reads them."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return {script.revision for script in ScriptDirectory.from_config(config).walk_revisions()}


def _audit(conn: psycopg.Connection[Any], say: Callable[[str], None]) -> Check:
    """The audit trail's hash chain verifies, where the revision has one."""
    present = conn.execute(HAS_TABLE, (f"{SCHEMA}.audit_chain",)).fetchone()
    conn.commit()
    if not present or not present[0]:
        return Check(True, "audit chain: none in this revision (not checked)")
    report = verify_chain(
        conn, on_progress=lambda done, total: say(f"audit chain: {done:,} of {total:,} rows")
    )
    if report.ok:
        return Check(True, f"audit chain: {report.checked:,} row(s) verified")
    more = len(report.problems) + report.more_problems - 1
    return Check(False, f"audit chain: {report.problems[0].text}" + (f" (and {more} more)" if more else ""))


def _secrets(conn: psycopg.Connection[Any], box: SecretBox | None) -> Check:
    """Every stored secret decrypts with the secret key in use (not checked without one)."""
    if box is None:
        return Check(True, "secrets: not checked (no MAILROOM_SECRET_KEY given)")
    stored, unreadable = unreadable_secrets(conn, box)
    conn.commit()
    if not unreadable:
        return Check(True, f"secrets: {stored} stored, every one decrypts with MAILROOM_SECRET_KEY")
    shown = ", ".join(unreadable[:5]) + (f" and {len(unreadable) - 5} more" if len(unreadable) > 5 else "")
    return Check(
        False,
        f"secrets: {len(unreadable)} of {stored} do not decrypt with MAILROOM_SECRET_KEY ({shown}): a restore"
        " needs the key in use when the backup was made (keep the old key after `keys rotate`)",
    )
