"""docs/defaults.md: each setting it names exists, and its Mailroom column is the code's default."""

from __future__ import annotations

import re
from pathlib import Path

from worker.core.config import DECLARED

PAGE = Path(__file__).resolve().parents[2] / "docs" / "defaults.md"
ROW = re.compile(r"^\| `(MAILROOM_[A-Z_]+)` \| (?P<design>[^|]+) \| `(?P<ours>[^`]+)` \| (?P<why>[^|]+) \|$")


def _rows() -> list[re.Match[str]]:
    return [m for line in PAGE.read_text(encoding="utf-8").splitlines() if (m := ROW.match(line))]


def test_every_row_names_a_declared_setting_and_gives_its_default() -> None:
    declared = {d.env: d for d in DECLARED}
    rows = _rows()
    assert len(rows) >= 8
    for row in rows:
        name = row.group(1)
        assert name in declared, f"{name} is not a Mailroom setting"
        value = declared[name].default
        shown = row.group("ours")
        expected = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
        assert shown == expected, f"{name}: the page says {shown}, the code's default is {expected}"


def test_every_row_says_what_the_design_has_and_why_mailroom_differs() -> None:
    for row in _rows():
        assert re.search(r"\d|`", row.group("design")), row.group(1)
        assert len(row.group("why").split()) >= 12, row.group(1)
        assert not re.search(r"\breference 0\d", row.group(0), re.IGNORECASE)
