"""The schema is Alembic's to change: up, down and up again, from the first revision with data in it, and
always exactly what `migrations/schema.sql` shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from worker.core import db
from worker.core.schema import SCHEMA_FILE, schema_diff

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
    shown = set(re.findall(r"^CREATE TABLE mailroom\.(\w+)", SCHEMA_FILE.read_text(), re.M))
    assert {t for t in shown if not PARTITION.match(t)} == created | {"alembic_version"}

    db.downgrade(empty_db_url, "base")
    assert _tables(empty_db_url) == set()
    assert db.current_revision(empty_db_url) is None

    db.upgrade(empty_db_url)
    assert _tables(empty_db_url) == created
    assert db.current_revision(empty_db_url) == db.head_revision()


def test_upgrade_at_head_does_nothing(db_url: str) -> None:
    assert db.upgrade(db_url) is False


def test_the_migrated_schema_is_exactly_what_schema_sql_shows(db_url: str) -> None:
    diff = schema_diff(db_url)
    assert diff == [], "migrations/schema.sql is out of date; regenerate it:\n" + "".join(diff)


def test_a_change_the_schema_file_does_not_show_fails_with_a_readable_diff(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE INDEX stray_index ON mailroom.email_queue (subject)")
        conn.execute("CREATE FUNCTION mailroom.stray() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        conn.execute("GRANT SELECT ON mailroom.email_queue TO PUBLIC")
    diff = "".join(schema_diff(db_url))
    assert "+CREATE INDEX stray_index ON mailroom.email_queue USING btree (subject);" in diff
    assert "+CREATE FUNCTION mailroom.stray() RETURNS integer" in diff
    assert "+GRANT SELECT ON TABLE mailroom.email_queue TO PUBLIC;" in diff


def test_upgrade_from_the_first_revision_keeps_its_data(empty_db_url: str) -> None:
    db.upgrade(empty_db_url, "0001")
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        sender = conn.execute(
            "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security,"
            " daily_limit) VALUES ('old', 'old@example.com', 'localhost', 25, 'none', 100) RETURNING id"
        ).fetchone()
        assert sender is not None
        for n, key in enumerate(["k1", None, None]):
            conn.execute(
                "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, idempotency_key,"
                " sender_account_id) VALUES (%s, %s, 'body', %s, %s)",
                (f"r{n}@example.com", f"subject {n}", key, sender[0]),
            )
    db.upgrade(empty_db_url)
    assert db.current_revision(empty_db_url) == db.head_revision()
    assert schema_diff(empty_db_url) == []
    with psycopg.connect(empty_db_url) as conn:
        rows = conn.execute(
            "SELECT recipient_email, status, idempotency_key FROM mailroom.email_queue ORDER BY id"
        ).fetchall()
    assert rows == [
        ("r0@example.com", "pending", "k1"),
        ("r1@example.com", "pending", None),
        ("r2@example.com", "pending", None),
    ]


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


def test_the_head_read_without_alembic_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    assert db.head_revision() == ScriptDirectory.from_config(config).get_current_head() == "0017"


def test_a_server_older_than_15_is_refused_before_anything_is_created(
    empty_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.dialects.postgresql.base import PGDialect

    monkeypatch.setattr(PGDialect, "_get_server_version_info", lambda self, connection: (14, 11))
    with pytest.raises(RuntimeError, match=r"needs PostgreSQL 15 or newer; this server is PostgreSQL 14\.11"):
        db.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'mailroom'").fetchone() is None
