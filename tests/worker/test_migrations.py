"""The schema is Alembic's to change: up, down and up again, and it matches the declared Core tables."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from worker.core import db
from worker.core.schema import SCHEMA, metadata

PARTITION = re.compile(r"^(send_logs|open_events|click_events)_(default|\d{4}_\d{2})$")


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'mailroom' AND tablename <> 'alembic_version'"
        ).fetchall()
    return {r[0] for r in rows if not PARTITION.match(r[0])}


def test_upgrade_downgrade_upgrade_round_trip(empty_db_url: str) -> None:
    assert db.current_revision(empty_db_url) is None
    assert db.upgrade(empty_db_url) is True
    created = _tables(empty_db_url)
    assert {"email_queue", "sender_accounts", "send_logs", "accounts", "tokens", "events", "inbox"} <= created
    assert {t.name for t in metadata.sorted_tables} == created

    db.downgrade(empty_db_url, "base")
    assert _tables(empty_db_url) == set()
    assert db.current_revision(empty_db_url) is None

    db.upgrade(empty_db_url)
    assert _tables(empty_db_url) == created
    assert db.current_revision(empty_db_url) == db.head_revision()


def test_upgrade_at_head_does_nothing(db_url: str) -> None:
    assert db.upgrade(db_url) is False


def _include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    if type_ == "schema":
        return name == SCHEMA
    if type_ == "table":
        return not PARTITION.match(name or "")
    return True


def test_migrated_schema_matches_declared_core_tables(db_url: str) -> None:
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(db_url), poolclass=NullPool
    )
    opts = {
        "include_schemas": True,
        "version_table_schema": SCHEMA,
        "include_name": _include_name,
        "compare_type": True,
        "compare_server_default": True,
    }
    with engine.connect() as connection:
        diffs = compare_metadata(MigrationContext.configure(connection, opts=opts), metadata)
    engine.dispose()
    assert diffs == []


def test_partitions_exist_for_this_month_and_ahead(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        "SELECT count(*) AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'mailroom.send_logs'::regclass AND c.relname ~ '_\\d{4}_\\d{2}$'"
    ).fetchone()
    assert rows is not None and rows["n"] == 5
    made = conn.execute(
        "SELECT mailroom.ensure_month_partitions('send_logs', (now() + interval '4 months')::date, 2) AS n"
    ).fetchone()
    assert made is not None and made["n"] == 2


def test_every_migration_sql_file_ships_in_the_package() -> None:
    """A revision's SQL parts are package data: a part left out would install an empty revision."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["migrations"]
    shipped = {p for pattern in globs for p in (root / "migrations").glob(pattern)}
    sql = set((root / "migrations").rglob("*.sql"))
    assert sql and sql <= shipped, sorted(str(p.relative_to(root)) for p in sql - shipped)


def test_a_revision_without_its_sql_parts_fails_instead_of_migrating_nothing(tmp_path: Path) -> None:
    from migrations import parts

    with pytest.raises(RuntimeError, match="no SQL parts"):
        parts.upgrade(tmp_path)
