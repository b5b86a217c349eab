"""The documentation site builds with `--strict`, its reference pages come from the code, and the
README stays a short first read whose links all lead somewhere."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from worker.core.config import DECLARED

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    """The MkDocs hook module, loaded from its file as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location(
        "docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as the test command builds it: strict, so any warning fails the build."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _text(site: Path, page: str) -> str:
    """A built page's text with the tags removed, as a reader sees it."""
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_the_commands_page_holds_every_commands_help(site: Path) -> None:
    text = _text(site, "reference/commands")
    for heading in ("mailroom senders add", "mailroom db upgrade", "mailroom worker", "mailroom console"):
        assert heading in text, heading
    assert "--password-env" in text  # the help itself, not only the headings


def test_the_settings_page_holds_every_declared_setting_with_its_default(site: Path) -> None:
    text = _text(site, "reference/settings")
    assert re.search(r"MAILROOM_DATABASE_URL\s+the embedded server\s+PostgreSQL to use", text)
    assert re.search(r"MAILROOM_LEASE_SECONDS\s+300\s+", text)
    missing = [s.env for s in DECLARED if s.env not in text]
    assert missing == []


def test_the_layout_page_lists_every_module(site: Path) -> None:
    text = _text(site, "reference/layout")
    assert re.search(r"worker\.engine\.copies\s+An email with several recipients", text)
    # Every source file, found apart from the hook's own walk, is on the page.
    names = [
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in ("mailroom", "worker", "console", "migrations")
        for path in (ROOT / package).rglob("*.py")
    ]
    assert len(names) > 150
    assert [name for name in names if not re.search(rf"(?<![\w.]){re.escape(name)}(?![\w.])", text)] == []


def test_the_python_api_page_holds_every_public_name(site: Path) -> None:
    import mailroom

    text = _text(site, "reference/python-api")
    assert [n for n in mailroom.__all__ if f"mailroom.{n}" not in text] == []
    assert "def enqueue(" in text


def test_the_settings_table_renders_a_row_for_each_declared_variable() -> None:
    rows = [line for line in _hook().settings_page().splitlines() if line.startswith("| `MAILROOM_")]
    assert [re.match(r"\| `(\w+)`", row).group(1) for row in rows] == [s.env for s in DECLARED]  # type: ignore[union-attr]
    assert "| `MAILROOM_QUEUE_LIFETIME_SECONDS` | 432000 (5 days) |" in "\n".join(rows)
    assert "| `MAILROOM_TRACK_CAMPAIGNS` | true |" in "\n".join(rows)


def test_the_readme_is_a_short_first_read() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250
    assert "python3 tasks.py demo" in "\n".join(lines) and "python3 tasks.py test" in "\n".join(lines)


def test_every_relative_link_of_the_readme_leads_to_a_file() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link.split("#", 1)[0] for link in links if not re.match(r"[a-z]+:", link)]
    assert relative
    assert [link for link in relative if not (ROOT / link).is_file()] == []


def test_no_page_cites_internal_reference_numbers() -> None:
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    assert [p.name for p in pages if re.search(r"\breference 0\d", p.read_text(encoding="utf-8"))] == []
