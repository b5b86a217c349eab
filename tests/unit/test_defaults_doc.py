"""docs/defaults.md: each setting and command option it names exists, and its Mailroom column is the
code's default."""

from __future__ import annotations

import re
from pathlib import Path

from console.cli import ENTRIES
from worker.cli.reference import commands
from worker.core.config import DECLARED

PAGE = Path(__file__).resolve().parents[2] / "docs" / "defaults.md"
OPTION_ROW = re.compile(
    r"^\| `mailroom (?P<path>[a-z -]+?) (?P<option>--[a-z-]+)` \| (?P<design>[^|]+) \| `(?P<ours>[^`]+)` \| (?P<why>[^|]+) \|$"
)
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


def test_every_command_row_names_an_option_and_gives_its_default() -> None:
    contexts = dict(commands(ENTRIES))
    rows = [m for line in PAGE.read_text(encoding="utf-8").splitlines() if (m := OPTION_ROW.match(line))]
    assert len(rows) >= 4
    for row in rows:
        path, option = tuple(row.group("path").split()), row.group("option")
        assert path in contexts, f"mailroom {' '.join(path)} is not a command"
        param = next((p for p in contexts[path].command.params if option in p.opts), None)
        assert param is not None, f"mailroom {' '.join(path)} has no {option}"
        default = param.get_default(contexts[path])
        # No default: None, or click's own marker for "not given" (not a value an option takes).
        shown = str(default) if isinstance(default, int | float | str) else "unset"
        assert row.group("ours") == shown, (
            f"{option}: the page says {row.group('ours')}, the code's default is {shown}"
        )
        assert re.search(r"\d", row.group("design")) and len(row.group("why").split()) >= 12, option
