"""Database access: which server to use, schema migrations, and connections."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings

if TYPE_CHECKING:
    from worker.core.embedded import EmbeddedPostgres

log = logging.getLogger(__name__)

MIGRATE_LOCK_KEY = 7_243_001  # pg_advisory_lock key serialising concurrent migrations

_embedded: EmbeddedPostgres | None = None
# psycopg prepares a statement on the server after its 5th run on a connection; a transaction-pooling
# PgBouncer hands the next transaction another server connection, where that statement does not exist.
_prepare_threshold: int | None = 5


def prepare_threshold(settings: Settings) -> int | None:
    """psycopg's `prepare_threshold` for Mailroom's connections: None (never prepare) behind a pooler."""
    return None if settings.transaction_pooler else 5


def connection_kwargs(settings: Settings, *, asynchronous_commit: bool = False) -> dict[str, Any]:
    """How a long-lived Mailroom connection (worker, tracker) is opened: autocommit, and
    `synchronous_commit=off` where losing the last fraction of a second to a server crash (or a
    failover: an asynchronous commit may not have reached the standby) is acceptable -- but not behind
    a transaction pooler, which refuses startup options (and would carry a session setting to other
    clients). Otherwise commits wait as the server's own `synchronous_commit` says (`on`, or
    `remote_apply` where an operator chose it), on a synchronous standby too."""
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": prepare_threshold(settings)}
    if asynchronous_commit and not settings.transaction_pooler:
        kwargs["options"] = "-c synchronous_commit=off"
    return kwargs


def configure(settings: Settings) -> None:
    """Make `connect` follow `settings` for the rest of this process (the command line calls it once)."""
    global _prepare_threshold
    _prepare_threshold = prepare_threshold(settings)


def embedded_server(settings: Settings) -> EmbeddedPostgres:
    """Return this process's handle on the embedded server (started on first use)."""
    global _embedded
    if _embedded is None:
        from worker.core.embedded import EmbeddedPostgres

        _embedded = EmbeddedPostgres(settings.home)
    return _embedded


def database_url(settings: Settings, *, migrate: bool = True) -> str:
    """Return the DSN in use: `MAILROOM_DATABASE_URL`, or the embedded server started and migrated to head."""
    if settings.database_url:
        return settings.database_url
    url = embedded_server(settings).start()
    if migrate:
        upgrade(url)
    return url


class SchemaMismatch(RuntimeError):
    """The database's schema is missing, older or newer than this version of Mailroom."""


def checked_url(settings: Settings) -> str:
    """The DSN in use, after checking that its schema is the one this version needs.

    The embedded server is migrated on the spot; an external database is only checked: migrating
    a shared server is an operator's decision (`mailroom db upgrade`)."""
    url = database_url(settings)
    if not settings.database_url:
        return url
    current, head = current_revision(url), head_revision()
    if current == head:
        return url
    if current is None:
        raise SchemaMismatch("Mailroom is not installed in this database; run: mailroom db upgrade")
    if current < head:
        raise SchemaMismatch(
            f"the database schema is at {current}, this Mailroom needs {head}; run: mailroom db upgrade"
        )
    raise SchemaMismatch(
        f"the database schema is at {current}, newer than this Mailroom ({head}); upgrade Mailroom first"
    )


@contextmanager
def connect(url: str, *, autocommit: bool = False) -> Iterator[psycopg.Connection[dict[str, object]]]:
    """Open a dict-row connection; the transaction commits on success and rolls back on error."""
    with psycopg.connect(
        url, autocommit=autocommit, row_factory=dict_row, prepare_threshold=_prepare_threshold
    ) as conn:
        yield conn


def _alembic_config(connection: object) -> object:
    from alembic.config import Config

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["connection"] = connection
    return config


_REVISION = re.compile(r'^(down_revision|revision) = (?:"([^"]*)"|None)$', re.MULTILINE)


def head_revision() -> str:
    """Return the newest revision shipped with this version of Mailroom.

    Read from the revision files' `revision` and `down_revision` lines, without importing Alembic
    (a tenth of a second a start, which every short `--drain` run would pay); a test checks it
    against Alembic's own answer."""
    import migrations

    revisions: dict[str, str | None] = {}
    for path in (Path(migrations.__file__).parent / "versions").glob("*.py"):
        found = dict((m.group(1), m.group(2)) for m in _REVISION.finditer(path.read_text(encoding="utf-8")))
        if found.get("revision"):
            revisions[found["revision"]] = found.get("down_revision")
    parents = set(revisions.values())
    heads = [r for r in revisions if r not in parents]
    if len(heads) != 1:
        raise RuntimeError(f"the shipped migrations have {len(heads)} heads: {sorted(heads)}")
    return heads[0]


def current_revision(url: str) -> str | None:
    """Return the revision the database is at, or None when Mailroom was never installed there."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(_REVISION_READABLE).fetchone()
        if not row or row[0] is None:
            return None
        # An application role may not read the table: it asks the function granted to it (revision 0012).
        version = conn.execute(_REVISION_FROM[bool(row[0])]).fetchone()
        return str(version[0]) if version and version[0] is not None else None


# NULL when Mailroom is not installed (or the role may not even see its schema), else whether the
# role may read alembic_version itself; a role that may do neither is told so by the database.
_REVISION_READABLE = (
    "SELECT CASE WHEN to_regclass('mailroom.alembic_version') IS NULL THEN NULL"
    " ELSE has_column_privilege('mailroom.alembic_version', 'version_num', 'SELECT')"
    " OR to_regprocedure('mailroom.schema_revision()') IS NULL END"
)
_REVISION_FROM = {
    True: "SELECT version_num FROM mailroom.alembic_version",
    False: "SELECT mailroom.schema_revision()",
}


def _run_alembic(url: str, action: str, revision: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            # Session-level advisory lock: concurrent processes migrate one after another.
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATE_LOCK_KEY})
            connection.commit()
            try:
                config = _alembic_config(connection)
                if action == "upgrade":
                    command.upgrade(config, revision)  # type: ignore[arg-type]
                else:
                    command.downgrade(config, revision)  # type: ignore[arg-type]
                connection.commit()
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATE_LOCK_KEY})
                connection.commit()
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> bool:
    """Migrate the database to `revision`; return whether anything had to run."""
    if revision == "head" and current_revision(url) == head_revision():
        return False
    log.info("migrating database to %s", revision)
    _run_alembic(url, "upgrade", revision)
    return True


def downgrade(url: str, revision: str) -> None:
    """Migrate the database down to `revision` (`base` removes every Mailroom table)."""
    _run_alembic(url, "downgrade", revision)
