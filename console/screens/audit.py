"""Audit trail: the latest sensitive operations, newest first (what `mailroom audit` lists)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable

from console.queries import like_pattern
from console.screens.base import COMPACT_BELOW, DataScreen, fill_table
from console.widgets.cells import one_line
from console.widgets.table import ConsoleTable
from worker.ops.audit import RECENT, describe, recent_params


class AuditScreen(DataScreen[list[dict[str, Any]]]):
    """Who did what, on what, how many rows, and when: read-only, live on new audit rows."""

    MODE = "audit"
    TITLE = "Audit trail"
    TABLES = frozenset({"audit_log"})
    # Whether the terminal was wide enough for the database role and detail columns when mounted.
    wide = True

    def compose(self) -> ComposeResult:
        """One table."""
        yield from self.compose_header()
        yield ConsoleTable(id="audit", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns: the database role and the detail only when there is room for them."""
        table = self.query_one("#audit", DataTable)
        self.wide = self.app.size.width >= COMPACT_BELOW
        if self.wide:
            table.add_columns("When (UTC)", "DB role", "Actor", "Action", "Target", "Count", "Detail")
        else:
            table.add_columns("When (UTC)", "Actor", "Action", "Target", "Count")

    async def fetch(self) -> list[dict[str, Any]]:
        """The latest page of audit rows (the same query as `mailroom audit`), matching the filter."""
        data = self.console.data
        return await data.fetch(RECENT, recent_params(data.page_size, pattern=like_pattern(self.filter_text)))

    def show(self, data: list[dict[str, Any]]) -> None:
        """Rows keyed by audit id, newest first."""
        table = self.query_one("#audit", DataTable)
        table.border_title = self.subtitle(f"Audit trail: recent operator actions ({len(data)})")
        self.remember("audit", {str(r["id"]): r for r in data})
        fill_table(table, ((str(r["id"]), self._cells(r)) for r in data))

    def _cells(self, row: dict[str, Any]) -> tuple[Any, ...]:
        when = row["at"].astimezone(UTC)
        cells: list[Any] = [
            f"{when:%Y-%m-%d %H:%M:%S}",
            one_line(row["actor"], 24),
            row["action"],
            one_line(row["target"], 30 if self.wide else 20) or "-",
            Text(f"{row['affected']:,}", justify="right"),
        ]
        if self.wide:
            cells.insert(1, one_line(row["db_role"], 16))
            cells.append(one_line(describe(row["detail"]), 80))
        return tuple(cells)
