"""The schema explains itself: a comment on every table, function and trigger, constraints named for what
they check, and `migrations/schema.sql` ordered by area with each table's objects beside it."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from worker.core import db
from worker.core.schema import SCHEMA_FILE, by_area
from worker.core.schema_areas import AREAS, OTHER

# Month partitions are made by maintenance, named by the calendar (their comment comes with them).
MONTH_PARTITION = r"_\d{4}_\d{2}$"
# The names PostgreSQL makes up for a CHECK, UNIQUE, FOREIGN KEY or EXCLUDE constraint written without one.
MADE_UP = re.compile(r"_(check\d*|key|fkey|excl)$")

UNCOMMENTED_TABLES = """
    SELECT c.relname FROM pg_class c
    WHERE c.relnamespace = 'mailroom'::regnamespace AND c.relkind IN ('r', 'p', 'v')
      AND obj_description(c.oid, 'pg_class') IS NULL AND c.relname !~ %s
    ORDER BY 1
"""
UNCOMMENTED_FUNCTIONS = """
    SELECT p.oid::regprocedure::text FROM pg_proc p
    WHERE p.pronamespace = 'mailroom'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL
    ORDER BY 1
"""
# A partition's copy of its parent's row trigger is the parent's trigger: only the parent's is commented.
UNCOMMENTED_TRIGGERS = """
    SELECT c.relname || '.' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = 'mailroom'::regnamespace AND NOT t.tgisinternal AND t.tgparentid = 0
      AND obj_description(t.oid, 'pg_trigger') IS NULL
    ORDER BY 1
"""
CONSTRAINTS = """
    SELECT c.conrelid::regclass::text AS rel, c.conname FROM pg_constraint c
    WHERE c.connamespace = 'mailroom'::regnamespace AND c.contype IN ('c', 'u', 'f', 'x')
    ORDER BY 1, 2
"""
COMMENTS = """
    SELECT c.relname AS object, d.objsubid, d.description FROM pg_description d
    JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid
    WHERE c.relnamespace = 'mailroom'::regnamespace
    UNION ALL
    SELECT p.oid::regprocedure::text, 0, d.description FROM pg_description d
    JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND p.oid = d.objoid
    WHERE p.pronamespace = 'mailroom'::regnamespace
    UNION ALL
    SELECT c.relname || '.' || t.tgname, 0, d.description FROM pg_description d
    JOIN pg_trigger t ON d.classoid = 'pg_trigger'::regclass AND t.oid = d.objoid
    JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = 'mailroom'::regnamespace
    ORDER BY 1, 2
"""


def _rows(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, params).fetchall()


def test_every_table_and_view_has_a_comment(db_url: str) -> None:
    assert _rows(db_url, UNCOMMENTED_TABLES, MONTH_PARTITION) == []


def test_every_function_has_a_comment(db_url: str) -> None:
    assert _rows(db_url, UNCOMMENTED_FUNCTIONS) == []


def test_every_trigger_has_a_comment(db_url: str) -> None:
    assert _rows(db_url, UNCOMMENTED_TRIGGERS) == []


def test_status_columns_list_their_values(db_url: str) -> None:
    rows = _rows(
        db_url,
        "SELECT col_description('mailroom.email_queue'::regclass, attnum) FROM pg_attribute"
        " WHERE attrelid = 'mailroom.email_queue'::regclass AND attname = 'status'",
    )
    described = rows[0][0]
    for status in (
        "unrendered",
        "pending",
        "assigned",
        "sent",
        "bounced",
        "failed",
        "cancelled",
        "suppressed",
    ):
        assert f"{status}:" in described


def test_a_month_partition_made_later_is_commented_as_it_is_made(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT mailroom.ensure_month_partitions('send_logs', '2031-04-01', 1)")
        row = conn.execute(
            "SELECT obj_description('mailroom.send_logs_2031_04'::regclass, 'pg_class')"
        ).fetchone()
    assert row is not None and row[0].startswith("send_logs of 2031-04 ")


def test_no_constraint_keeps_a_name_postgresql_made_up(db_url: str) -> None:
    made_up = [f"{rel} {name}" for rel, name in _rows(db_url, CONSTRAINTS) if MADE_UP.search(name)]
    assert made_up == []


def test_a_violated_constraint_names_what_it_checks(conn: psycopg.Connection[dict[str, Any]]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute("INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, priority)"
                     " VALUES ('ada@example.com', 'hi', 'body', 5000)")  # fmt: skip
    assert refused.value.diag.constraint_name == "email_queue_priority_range"


def _section(text: str, table: str) -> str:
    """The lines of schema.sql from `table`'s heading to the next heading."""
    match = re.search(rf"^-- {table}\n(.*?)(?=^-- )", text, re.M | re.S)
    assert match is not None, f"no section for {table} in schema.sql"
    return match.group(1)


def test_schema_sql_keeps_each_tables_constraints_indexes_and_triggers_in_its_section() -> None:
    text = SCHEMA_FILE.read_text(encoding="utf-8")
    queue = _section(text, "email_queue")
    assert "CREATE TABLE mailroom.email_queue (" in queue
    assert "ADD CONSTRAINT email_queue_pkey PRIMARY KEY (id);" in queue
    assert "CREATE INDEX email_queue_claim_idx ON mailroom.email_queue" in queue
    assert "CREATE TRIGGER email_queue_before_update BEFORE UPDATE ON mailroom.email_queue" in queue
    assert "COMMENT ON COLUMN mailroom.email_queue.status IS" in queue
    assert "CREATE TABLE" not in queue.replace("CREATE TABLE mailroom.email_queue (", "")
    # Every primary key stands in its own table's section: before the next table begins.
    for table, body in re.findall(r"^-- (\w+)\n(.*?)(?=^-- |\Z)", text, re.M | re.S):
        for owner in re.findall(
            r"^ALTER TABLE ONLY mailroom\.(\w+)\n    ADD CONSTRAINT \w+ PRIMARY KEY", body, re.M
        ):
            assert owner == table


def test_schema_sql_is_grouped_by_area_with_headings() -> None:
    headings = re.findall(r"^-- == (.+) ==$", SCHEMA_FILE.read_text(encoding="utf-8"), re.M)
    assert headings == [area.title for area in AREAS]
    assert OTHER not in headings  # every table and function has its area


def test_an_object_no_area_names_is_still_shown_last() -> None:
    dump = (
        "--\n-- Name: stray; Type: TABLE; Schema: mailroom; Owner: -\n--\n\nCREATE TABLE mailroom.stray (a int);\n\n"
        "--\n-- Name: jobs; Type: TABLE; Schema: mailroom; Owner: -\n--\n\nCREATE TABLE mailroom.jobs (a int);\n\n"
        "--\n-- Name: stray stray_pkey; Type: CONSTRAINT; Schema: mailroom; Owner: -\n--\n\n"
        "ALTER TABLE ONLY mailroom.stray\n    ADD CONSTRAINT stray_pkey PRIMARY KEY (a);\n"
    )
    shown = by_area(dump)
    assert shown.index("-- == lifecycle: accounts and tokens ==") < shown.index("CREATE TABLE mailroom.jobs")
    assert shown.index(f"-- == {OTHER} ==") < shown.index("CREATE TABLE mailroom.stray (a int);")
    assert shown.index("CREATE TABLE mailroom.stray") < shown.index("ADD CONSTRAINT stray_pkey")


def test_0009_down_restores_the_names_and_removes_the_comments_it_added(empty_db_url: str) -> None:
    db.upgrade(empty_db_url, "0008")
    names, comments = _rows(empty_db_url, CONSTRAINTS), _rows(empty_db_url, COMMENTS)
    db.upgrade(empty_db_url, "0009")
    assert _rows(empty_db_url, CONSTRAINTS) != names
    assert len(_rows(empty_db_url, COMMENTS)) > len(comments)

    db.downgrade(empty_db_url, "0008")
    assert _rows(empty_db_url, CONSTRAINTS) == names
    assert _rows(empty_db_url, COMMENTS) == comments
