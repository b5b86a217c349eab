"""The layout holds: the worker never imports Textual, functions and modules stay small enough to read."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import worker

ROOT = Path(__file__).resolve().parents[1]
# A function a reader can hold in mind (60 lines), a module one can read through (500 lines).
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
CHECKED = ("mailroom", "worker", "console", "migrations")


def _sources() -> list[Path]:
    return sorted(p for top in CHECKED for p in (ROOT / top).rglob("*.py"))


def test_worker_package_imports_without_textual() -> None:
    modules = sorted(m.name for m in pkgutil.walk_packages(worker.__path__, "worker."))
    assert "worker.engine.delivery" in modules and "worker.cli.main" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'console'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_no_function_is_longer_than_a_reader_can_hold() -> None:
    long: list[str] = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_no_module_is_longer_than_one_can_read_through() -> None:
    long = [
        f"{path.relative_to(ROOT)} ({n} lines)"
        for path in _sources()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert long == []


def test_every_room_of_the_worker_is_a_package() -> None:
    rooms = {p.parent.name for p in (ROOT / "worker").glob("*/__init__.py")}
    assert rooms == {"core", "engine", "producers", "tracking", "ops", "hooks", "cli", "devtools"}
    assert sorted(p.name for p in (ROOT / "worker").glob("*.py")) == ["__init__.py"]


def _test_modules_imported_by(path: Path) -> list[str]:
    """The test modules (`tests.….test_*`, or relative) a file imports, by dotted name."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    ours = [n for n in names if n.startswith(("tests.", "."))]
    return sorted({n for n in ours if n.rsplit(".", 1)[-1].startswith("test_")})


def test_no_test_module_imports_another_test_module() -> None:
    # Helpers shared by several test modules live in helper and fixture modules (tests/cli.py,
    # tests/console/helpers.py, tests/fixtures_*.py): importing a test module runs its tests' imports
    # and collects nothing, and a reader looking for a helper should not have to open a test.
    importing = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for name in _test_modules_imported_by(path)
    ]
    assert importing == []


# Where the engine may still say `dict[str, Any]`, and why: none of them is an email.
ENGINE_UNTYPED = {
    "database.py": 1,  # `Params`: a statement's parameters, as psycopg takes them
    "rows.py": 2,  # an email's headers (a JSON object), and `as_row` for worker.core.message's builder
    "sender_book.py": 4,  # sender account rows, read once per reload, each turned into a `Sender` (and its Gmail key)
}


def test_the_engine_passes_emails_as_typed_rows_not_dicts() -> None:
    # A claimed email is a `worker.engine.rows.ClaimedEmail`; a new untyped row in the engine fails here.
    found = {
        path.name: path.read_text(encoding="utf-8").count("dict[str, Any]")
        for path in sorted((ROOT / "worker" / "engine").glob("*.py"))
    }
    assert {name: n for name, n in found.items() if n} == ENGINE_UNTYPED
