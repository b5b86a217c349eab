"""The console's table: vim and k9s keys, sorting by any column (key or header click) shown in the header."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from console.context import Reload

ASCENDING, DESCENDING = " ▲", " ▼"


DURATION = re.compile(r"(?:in )?((?:\d+[dhms])+)(?: ago)?")
UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def sort_value(cell: Any) -> tuple[int, float, str]:
    """How a cell sorts: ages and durations by time ('2m ago' before 'in 14m'), then by the first number
    ('412/2000', '~1.0M', a bar and '25/25'), then as text; empty and '-' last."""
    plain = (cell.plain if isinstance(cell, Text) else str(cell)).strip()
    if plain in ("", "-"):
        return (2, 0.0, "")
    if match := DURATION.fullmatch(plain):
        seconds = sum(int(n) * UNIT_SECONDS[u] for n, u in re.findall(r"(\d+)([dhms])", match.group(1)))
        return (0, -seconds if plain.endswith(" ago") else seconds, plain)
    if number := NUMBER.search(plain):
        return (0, float(number.group().replace(",", "")), plain.lower())
    return (1, 0.0, plain.lower())


class ConsoleTable(DataTable[Any]):
    """A DataTable with j/k, g/G, Home/End, PageUp/PageDown and sorting; `fill_table` keeps the sort."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g,home", "first", "First row", show=False),
        Binding("G,end", "last", "Last row", show=False),
        Binding("o", "sort_next", "Sort", tooltip="Sort by the next column (then back to the usual order)"),
        Binding("O", "sort_reverse", "Reverse", show=False, tooltip="Reverse the sort"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sort_column: ColumnKey | None = None
        self.sort_descending = False
        self._labels: dict[ColumnKey, str] = {}

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        # Textual widens the columns for new rows here, when the table is next idle, without dropping
        # what it rendered before: a header drawn between filling the table and this update kept the
        # empty table's column widths (misaligned over its rows) until the next change.
        super()._update_dimensions(new_rows)
        self._clear_caches()

    def action_first(self) -> None:
        """Cursor to the first row."""
        if self.row_count:
            self.move_cursor(row=0)

    def action_last(self) -> None:
        """Cursor to the last row."""
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)

    def action_sort_next(self) -> None:
        """Sort by the column right of the current sort column; past the last, the query's own order."""
        keys = list(self.columns)
        index = keys.index(self.sort_column) + 1 if self.sort_column in keys else 0
        self.sort_by(keys[index] if index < len(keys) else None, descending=False)

    def action_sort_reverse(self) -> None:
        """Reverse the current sort (sort by the first column when there is none)."""
        column = self.sort_column or next(iter(self.columns), None)
        self.sort_by(column, descending=not self.sort_descending if self.sort_column else True)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a header sorts by it; a second click reverses."""
        event.stop()
        same = event.column_key == self.sort_column
        self.sort_by(event.column_key, descending=same and not self.sort_descending)

    def sort_by(self, column: ColumnKey | None, *, descending: bool) -> None:
        """Sort the rows shown by `column` (None: as the query gave them, on the next refresh) and mark the header."""
        self.sort_column, self.sort_descending = column, descending
        for key, col in self.columns.items():
            base = self._labels.setdefault(key, col.label.plain)
            mark = (DESCENDING if descending else ASCENDING) if key == column else ""
            col.label = Text(base + mark)
        if column is not None and self.row_count:
            self.sort(column, key=sort_value, reverse=descending)
        elif column is None:
            # Back to the query's order: the screen's next load puts the rows as the query gives them.
            self.screen.post_message(Reload())
        self.refresh()

    def order(self, rows: Sequence[tuple[str, list[Any]]]) -> list[tuple[str, list[Any]]]:
        """Rows in the table's sort order (unchanged when unsorted)."""
        if self.sort_column is None or self.sort_column not in self.columns:
            return list(rows)
        index = list(self.columns).index(self.sort_column)
        return sorted(
            rows,
            key=lambda r: sort_value(r[1][index] if index < len(r[1]) else ""),
            reverse=self.sort_descending,
        )
