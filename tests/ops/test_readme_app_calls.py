"""Nothing in the documentation tells an application to do what its role cannot: every SQL call the
README and the docs pages show to applications, parsed from their text, runs as a role granted
`mailroom db grant app`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import mailroom
from tests.fixtures_db import drop_roles, role_url
from worker.ops import roles

ROOT = Path(__file__).resolve().parents[2]
# The threat model is left out: it names what applications may NOT call, and the doors they are refused.
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name != "threat-model.md")]
ENQUEUE = (ROOT / "docs" / "enqueue.md").read_text(encoding="utf-8")
_SPAN = re.compile(r"`([^`\n]+)`")
_NAME = re.compile(r"\bmailroom\.([a-z_]+)")


def _section(text: str, heading: str) -> str:
    """A page from `heading` to the next heading of the same or a higher level (outside code)."""
    level = heading.split(" ", 1)[0]
    lines = text.splitlines()
    start = lines.index(heading)
    fenced = False
    for end in range(start + 1, len(lines)):
        fenced ^= lines[end].startswith("```")
        if not fenced and re.match(rf"#{{1,{len(level)}}} ", lines[end]):
            break
    else:
        end = len(lines)
    return "\n".join(lines[start:end])


def _sentences_about_applications() -> list[str]:
    """Every prose sentence of the README and the docs that speaks of applications (code left out)."""
    found = []
    for page in PAGES:
        prose = re.sub(r"```.*?```", "\n\n", page.read_text(encoding="utf-8"), flags=re.S)
        for paragraph in re.split(r"\n\s*\n", prose):
            flat = " ".join(paragraph.split())
            found += [s for s in re.split(r"(?<=\.)\s+(?=[A-Z])", flat) if re.search(r"\b[Aa]pplication", s)]
    return found


def _statements() -> list[str]:
    """The inline `SELECT mailroom.…` calls shown to applications: in sentences about them, and on the
    Enqueue page."""
    spans = [s for sentence in _sentences_about_applications() for s in _SPAN.findall(sentence)]
    spans += _SPAN.findall(ENQUEUE)
    return sorted({s for s in spans if s.startswith("SELECT mailroom.")})


def _fenced(section: str, language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", _section(ENQUEUE, section), re.S)
    assert found is not None, (section, language)
    return found.group(1)


@pytest.fixture
def app(db_url: str, role_lock: None) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection as a role with exactly the application's grant."""
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "app", "mr_readme_app", create=True, actor="tester")
    with psycopg.connect(role_url(db_url, "mr_readme_app"), autocommit=True) as conn:
        yield conn
    drop_roles(db_url, "mr_readme_app")


def test_the_parser_finds_the_calls_the_docs_show_to_applications() -> None:
    names = {
        n for s in _sentences_about_applications() for span in _SPAN.findall(s) for n in _NAME.findall(span)
    }
    assert {"enqueue", "my_emails", "app_audit"} <= names, names
    assert any(s.startswith("SELECT mailroom.app_audit(") for s in _statements()), _statements()


def test_every_mailroom_object_named_to_applications_is_theirs_to_use(app: psycopg.Connection[Any]) -> None:
    names = {
        n for s in _sentences_about_applications() for span in _SPAN.findall(s) for n in _NAME.findall(span)
    }
    refused = []
    for name in sorted(names):
        row = app.execute(
            "SELECT coalesce(bool_and(has_function_privilege(p.oid, 'EXECUTE')),"
            "  has_table_privilege(to_regclass('mailroom.' || %s), 'SELECT'))"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'mailroom' AND p.proname = %s",
            (name, name),
        ).fetchone()
        if row is not None and row[0] is None and name in mailroom.__all__:
            continue  # the Python API's name (`mailroom.enqueue_async`), no object in the database
        if row is None or row[0] is not True:
            refused.append(name)
    assert refused == []


def test_each_inline_call_shown_to_applications_runs_as_an_application_role(
    app: psycopg.Connection[Any],
) -> None:
    statements = _statements()
    assert statements
    refused = []
    for statement in statements:
        try:
            app.execute(statement)  # the documentation's own text, as an application would paste it
        except psycopg.Error as exc:
            refused.append((statement, str(exc).splitlines()[0]))
    assert refused == []


def test_the_psql_and_node_examples_run_as_an_application_role(app: psycopg.Connection[Any]) -> None:
    app.execute("CREATE TEMP TABLE orders (id integer, customer text)")  # the example's own table
    app.execute(_fenced("## From SQL, in any language", "sql"))
    mine = app.execute("SELECT id, idempotency_key FROM mailroom.my_emails").fetchall()
    assert [key for _, key in mine] == ["order-42-received"]
    js = _fenced("## From SQL, in any language", "js")
    call = re.search(r'db\.query\(\s*"(SELECT mailroom\.[^"]+)",\s*(\[.*?\])\);', js, re.S)
    assert call is not None
    query, params = call.group(1), json.loads(call.group(2))
    assert re.findall(r"\$(\d+)", query) == [str(i) for i in range(1, len(params) + 1)]
    row = app.execute(re.sub(r"\$\d+", "%s", query), params).fetchone()
    # The same key from the same role: the first email's id, from either language.
    assert row is not None and row[0] == mine[0][0]
