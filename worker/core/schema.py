"""The whole `mailroom` schema as one readable SQL file, and the live database's schema to compare with it.

`migrations/schema.sql` is what every revision together leaves behind: tables, indexes, functions,
triggers, grants, comments and partitioned parents, as pg_dump prints them with noise removed
(session settings, owners, the per-dump `\\restrict` key and the month partitions, whose names follow
the calendar), then ordered for a reader: by area (`worker.core.schema_areas`), each table followed by
its comments, constraints, indexes, trigger functions and triggers. The migrations stay the only way
the schema changes (the file is read, never run); the tests fail when the two disagree.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from worker.core.pgtools import client_tool, server_major, tool_connection
from worker.core.schema_areas import AREAS, OTHER

SCHEMA = "mailroom"
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "migrations" / "schema.sql"
# Month partitions (send_logs_2026_11, ...) are made ahead by maintenance; only their parents count.
_MONTH_PARTITIONS = f"{SCHEMA}.*_[0-9][0-9][0-9][0-9]_[0-9][0-9]"
_NOISE = re.compile(r"^(SET |SELECT pg_catalog\.set_config|\\restrict |\\unrestrict |-- Dumped (from|by) )")
_ENTRY = re.compile(r"^--\n-- Name: (.*?); Type: (.*?); Schema: .*?; Owner: .*\n--\n", re.M)
_BANNER = re.compile(r"^--\n-- PostgreSQL database dump( complete)?\n--$", re.M)
_ON_TABLE = re.compile(rf"\bON (?:ONLY )?{SCHEMA}\.(\w+)")
_ALTER_TABLE = re.compile(rf"\bALTER TABLE (?:ONLY )?{SCHEMA}\.(\w+)")
_ATTACH = re.compile(rf"ATTACH PARTITION {SCHEMA}\.(\w+)")
_TRIGGER_FUNCTION = re.compile(rf"EXECUTE FUNCTION {SCHEMA}\.(\w+)\(")
# Where each kind of entry stands within its table's section.
_RANK = {
    "TABLE": 0, "VIEW": 0, "COMMENT TABLE": 1, "COMMENT VIEW": 1, "COMMENT COLUMN": 2, "SEQUENCE": 3,
    "SEQUENCE OWNED BY": 3, "DEFAULT": 4, "TABLE ATTACH": 5, "CONSTRAINT": 6, "FK CONSTRAINT": 7,
    "COMMENT CONSTRAINT": 8, "INDEX": 9, "INDEX ATTACH": 10, "COMMENT INDEX": 11, "FUNCTION": 12,
    "TRIGGER": 13, "ACL TABLE": 14, "ACL VIEW": 14, "POLICY": 15, "ROW SECURITY": 15,
}  # fmt: skip
HEADER = (
    "-- The whole mailroom schema as the migrations leave it (generated; do not edit), by area: each table\n"
    "-- with its comments, constraints, indexes and triggers. Read it; the migrations are what build it.\n"
    "-- Regenerate after adding a revision: python -m worker.core.schema > migrations/schema.sql\n"
)


@dataclass(frozen=True)
class _Entry:
    """One object of pg_dump's output: its name and type from the banner, and its SQL."""

    name: str
    kind: str
    body: str
    position: int


def _entries(dump: str) -> list[_Entry]:
    text = _BANNER.sub("", dump)
    marks = list(_ENTRY.finditer(text))
    entries = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        entries.append(_Entry(mark.group(1), mark.group(2), text[mark.end() : end].strip(), i))
    return entries


def _function(signature: str) -> str:
    return signature.split("(", 1)[0]


class _Owners:
    """Which table (or function, for a function's comment and grants) each entry belongs to."""

    def __init__(self, entries: list[_Entry]) -> None:
        self.index_table: dict[str, str] = {}
        self.trigger_tables: defaultdict[str, set[str]] = defaultdict(set)
        self.parent: dict[str, str] = {}
        for e in entries:
            table = e.name.split(" ", 1)[0]
            if e.kind == "INDEX" and (m := _ON_TABLE.search(e.body)):
                self.index_table[e.name] = m.group(1)
            elif e.kind == "CONSTRAINT":
                self.index_table[e.name.split(" ", 1)[1]] = table
            elif e.kind == "TRIGGER" and (m := _TRIGGER_FUNCTION.search(e.body)):
                self.trigger_tables[m.group(1)].add(table)
            elif e.kind == "TABLE ATTACH" and (m := _ALTER_TABLE.search(e.body)):
                self.parent[e.name] = m.group(1)

    def of(self, e: _Entry) -> tuple[str, str]:
        """("table", name), ("function", name) or ("schema", "") for an entry."""
        kind, name = e.kind, e.name
        if kind in ("COMMENT", "ACL"):
            kind, _, name = name.partition(" ")
            if kind == "COLUMN":
                name = name.split(".", 1)[0]
            elif kind in ("TRIGGER", "CONSTRAINT", "POLICY"):
                name = name.split(" ON ", 1)[1]
            elif kind == "INDEX":
                name = self.index_table.get(name, name)
        if kind == "SCHEMA":
            return "schema", ""
        if kind in ("FUNCTION", "PROCEDURE", "AGGREGATE"):
            return "function", _function(name)
        if kind in ("SEQUENCE", "SEQUENCE OWNED BY") and (m := _ALTER_TABLE.search(e.body)):
            return "table", m.group(1)
        if kind == "INDEX ATTACH":
            return "table", self.index_table.get(name, name)
        if kind == "INDEX" and e.kind == "INDEX":
            return "table", self.index_table.get(name, name)
        return "table", name.split(" ", 1)[0]


def _rank(e: _Entry) -> tuple[int, str, int]:
    if e.kind in ("COMMENT", "ACL"):
        target = e.name.partition(" ")[0]
        if target in ("FUNCTION", "PROCEDURE", "AGGREGATE"):
            return _RANK["FUNCTION"], _function(e.name.partition(" ")[2]), 1 if e.kind == "COMMENT" else 2
        if target == "TRIGGER":
            return _RANK["TRIGGER"], e.name.split(" ")[1], 1
        return _RANK.get(f"{e.kind} {target}", 16), "", 0
    if e.kind in ("FUNCTION", "PROCEDURE", "AGGREGATE"):
        return _RANK["FUNCTION"], _function(e.name), 0
    if e.kind == "TRIGGER":
        return _RANK["TRIGGER"], e.name.split(" ")[1], 0
    return _RANK.get(e.kind, 16), "", 0


def by_area(dump: str) -> str:
    """pg_dump's objects regrouped by area, each table's own objects right after it."""
    entries = _entries(dump)
    owners = _Owners(entries)
    tables: defaultdict[str, list[_Entry]] = defaultdict(list)
    functions: defaultdict[str, list[_Entry]] = defaultdict(list)
    schema: list[_Entry] = []
    for e in entries:
        kind, name = owners.of(e)
        if kind == "schema":
            schema.append(e)
        elif kind == "function" and len(owners.trigger_tables.get(name, ())) == 1:
            tables[next(iter(owners.trigger_tables[name]))].append(e)
        elif kind == "function":
            functions[name].append(e)
        else:
            tables[name].append(e)
    children: defaultdict[str, list[str]] = defaultdict(list)
    for child, parent in sorted(owners.parent.items()):
        children[parent].append(child)

    areas = [(area.title, area.tables, area.functions) for area in AREAS]
    placed = {t for _, ts, _ in areas for t in ts} | {c for cs in children.values() for c in cs}
    named = {f for _, _, fs in areas for f in fs}
    areas.append((OTHER, tuple(sorted(set(tables) - placed)), tuple(sorted(set(functions) - named))))

    out = [HEADER, *(e.body for e in schema)]
    for title, area_tables, area_functions in areas:
        sections = []
        for table in area_tables:
            for name in (table, *children.get(table, ())):
                if tables.get(name):
                    sections.append(_section(f"{name}", tables[name]))
        fns = [e for f in area_functions for e in functions.get(f, ())]
        if fns:
            sections.append(_section("functions", fns))
        if sections:
            out.append(f"-- == {title} ==")
            out.extend(sections)
    return "\n\n".join(out).rstrip() + "\n"


def _section(title: str, entries: list[_Entry]) -> str:
    ordered = [e.body for e in sorted(entries, key=lambda e: (*_rank(e), e.position)) if e.body]
    text = f"-- {title}"
    for previous, body in zip([text, *ordered], ordered, strict=False):
        # A table's column comments read as one block, like the columns they explain.
        together = previous.startswith("COMMENT ON COLUMN") and body.startswith("COMMENT ON COLUMN")
        text += ("\n" if together else "\n\n") + body
    return text


def normalise(dump: str) -> str:
    """pg_dump's schema output without the lines that vary between runs, servers or months, by area."""
    lines = [line for line in dump.splitlines() if not _NOISE.match(line)]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return by_area(text)


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


# schema.sql is pg_dump's output from PostgreSQL 18 (the embedded server's). Other supported versions
# (docs/install.md) print the same schema in other words, so the check compares both sides in words that
# every version shares, and takes what a revision knowingly does per version as the file's version does it.
FILE_MAJOR = 18
# 18 names the NOT NULL constraints a partition inherits: <parent>_<column>_not_null, the name its parent
# gave them by default. Earlier versions name none; a name made from the column's says nothing either way.
_CREATE_TABLE = re.compile(rf"^CREATE TABLE {SCHEMA}\.(\w+) \(\n(.*?)\n\)", re.M | re.S)
_NAMED_NOT_NULL = re.compile(r"^( {4}(\w+) .*?)CONSTRAINT (\w+) NOT NULL", re.M)
# Before 16 every column of a view over one relation carries the relation's name (email_queue.id).
_CREATE_VIEW = re.compile(rf"^CREATE VIEW {SCHEMA}\.\w+ .*?;$", re.M | re.S)
_FROM = re.compile(r"\b(?:FROM|JOIN)\s+([\w.]+)(?:[ \t]+(?!WHERE\b|GROUP\b|ORDER\b|UNION\b|LIMIT\b)(\w+))?")
# mailroom.new_event_id() makes event ids with uuidv7() where the server has it (18 and later).
_NEW_EVENT_ID = (
    f"CREATE FUNCTION {SCHEMA}.new_event_id() RETURNS uuid\n    LANGUAGE sql\n    AS $$SELECT {{}}()$$;"
)
_BEFORE_18 = ((_NEW_EVENT_ID.format("gen_random_uuid"), _NEW_EVENT_ID.format("uuidv7")),)


def _default_not_null_unnamed(match: re.Match[str]) -> str:
    columns = match.group(2)

    def unnamed(column: re.Match[str]) -> str:
        if not column.group(3).endswith(f"_{column.group(2)}_not_null"):
            return column.group(0)
        return f"{column.group(1)}NOT NULL"

    return match.group(0).replace(columns, _NAMED_NOT_NULL.sub(unnamed, columns))


def _view_columns_unqualified(match: re.Match[str]) -> str:
    view = match.group(0)
    sources = _FROM.findall(view)
    if len(sources) != 1 or sources[0][1]:  # several relations, or an alias: the names are needed
        return view
    relation = re.escape(sources[0][0].rsplit(".", 1)[-1])
    # email_queue.id, not mailroom.email_queue itself (a dot before it) nor a longer name ending in it
    return re.sub(rf"(?<![\w.]){relation}\.(?=\w)", "", view)


def comparable(schema: str) -> str:
    """The schema in words every supported PostgreSQL version prints alike (see FILE_MAJOR)."""
    schema = _CREATE_TABLE.sub(_default_not_null_unnamed, schema)
    return _CREATE_VIEW.sub(_view_columns_unqualified, schema)


def as_file_version(schema: str, major: int) -> str:
    """The live schema of a server of version `major` as the file's version would have it, compared alike."""
    if major < FILE_MAJOR:
        for earlier, file_version in _BEFORE_18:
            schema = schema.replace(earlier, file_version)
    return comparable(schema)


def schema_diff(url: str, expected: Path = SCHEMA_FILE) -> list[str]:
    """The differences between the live schema and the file, as unified-diff lines (empty: identical)."""
    live = as_file_version(dump_schema(url), server_major(url)).splitlines(keepends=True)
    want = comparable(expected.read_text(encoding="utf-8")).splitlines(keepends=True)
    return list(difflib.unified_diff(want, live, fromfile=str(expected.name), tofile="live database"))


def main() -> int:
    """Print the live schema of the configured database (the embedded one by default)."""
    from worker.core.config import Settings
    from worker.core.db import database_url

    sys.stdout.write(dump_schema(database_url(Settings.from_env())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
