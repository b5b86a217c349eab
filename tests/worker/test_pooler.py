"""Behind a transaction-pooling PgBouncer: no session state on pooled connections.

A pooler hands each transaction whichever server connection is free, so nothing a connection
remembers between transactions may be relied on: session-level SET, session advisory locks,
named prepared statements, LISTEN, startup options. `bench/pgbouncer.py` runs the delivery path
through a real PgBouncer; these tests keep the code to the rule where PgBouncer is not installed.
"""

from __future__ import annotations

import ast
import asyncio
import re
from dataclasses import replace
from pathlib import Path

from tests.worker.helpers import add_sender, enqueue_many, statuses
from worker.core.config import Settings
from worker.core.db import connection_kwargs, prepare_threshold
from worker.devtools.sink import RunningSink
from worker.engine.delivery import Worker, WorkerOptions

ROOT = Path(__file__).resolve().parents[2]
# Where session state is allowed, and why: a LISTEN connection is a direct one
# (MAILROOM_LISTEN_DATABASE_URL), and so is maintenance's behind a pooler (its advisory lock spans
# its steps); migrations run against PostgreSQL directly (`db upgrade`); the sent journal prepares
# its statement only when no pooler is configured (`prepared`).
ALLOWED = {
    "LISTEN": {"worker/core/listen.py", "console/live.py"},
    "session advisory lock": {"worker/core/db.py", "worker/ops/retention.py"},
    "named prepared statement": {"worker/engine/sent_journal.py"},
    "startup option": {"worker/core/db.py"},
}
SQL_MARKS = {
    "LISTEN": re.compile(r"^\s*LISTEN\b"),
    "session advisory lock": re.compile(r"pg_(try_)?advisory_lock(_shared)?\("),
    "startup option": re.compile(r"^-c "),
}
# `SET name = ...` / `SET name TO ...` (not SET LOCAL); a help text beginning "Set the ..." is no SQL.
SESSION_SET = re.compile(r"^\s*SET\s+(?!LOCAL\b)[a-z_][a-z0-9_.]*\s*(=|\bTO\b)", re.IGNORECASE)


def _prepares(node: ast.AST) -> bool:
    """A named prepared statement: `pgconn.send_prepare(...)`, `conn.prepare(...)` or `prepare=True`."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("send_prepare", "prepare")
    if isinstance(node, ast.keyword) and node.arg == "prepare":
        return not (isinstance(node.value, ast.Constant) and node.value.value is False)
    return False


def _uses(path: Path) -> tuple[set[str], list[str]]:
    """What session state a module's SQL strings and calls use, and any session-level SET."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used: set[str] = set()
    session_sets: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            used |= {name for name, mark in SQL_MARKS.items() if mark.search(node.value)}
            if SESSION_SET.search(node.value):
                session_sets.append(node.value.strip()[:60])
        elif _prepares(node):
            used.add("named prepared statement")
    return used, session_sets


def test_session_state_appears_only_where_the_connection_is_not_pooled() -> None:
    found: dict[str, set[str]] = {name: set() for name in ALLOWED}
    session_sets: list[str] = []
    for path in sorted([*(ROOT / "worker").rglob("*.py"), *(ROOT / "console").rglob("*.py")]):
        name = str(path.relative_to(ROOT))
        used, sets = _uses(path)
        for kind in used:
            found[kind].add(name)
        session_sets += [f"{name}: {text}" for text in sets]
    for kind, allowed in ALLOWED.items():
        assert found[kind] <= allowed, (kind, sorted(found[kind] - allowed))
    assert session_sets == []


def test_behind_a_pooler_connections_prepare_nothing_and_carry_no_startup_options(settings: Settings) -> None:
    pooled = replace(settings, transaction_pooler=True)
    assert prepare_threshold(pooled) is None
    assert connection_kwargs(pooled, asynchronous_commit=True) == {
        "autocommit": True,
        "prepare_threshold": None,
    }
    direct = connection_kwargs(settings, asynchronous_commit=True)
    assert direct["options"] == "-c synchronous_commit=off" and direct["prepare_threshold"] == 5


def test_a_worker_in_pooler_mode_delivers_without_prepared_statements(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 30)
    worker = Worker(
        db_url, replace(settings, transaction_pooler=True), WorkerOptions(concurrency=2, drain=True)
    )
    asyncio.run(asyncio.wait_for(worker.run(), 60))
    assert statuses(db_url) == {"sent": 30}
    assert worker._recorder is not None and worker._recorder.prepared is False
