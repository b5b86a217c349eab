"""Queue: pending email by priority and by campaign."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable

from console.figures import short
from console.queries import PendingGroups
from console.screens.base import COMPACT_BELOW, DataScreen, fill_table
from console.widgets.cells import duration
from console.widgets.table import ConsoleTable


class QueueScreen(DataScreen[PendingGroups]):
    """Where the pending email is: which priorities and campaigns, how much is due, how old."""

    MODE = "queue"
    TITLE = "Queue"
    TABLES = frozenset({"email_queue"})

    def compose(self) -> ComposeResult:
        """Two tables side by side."""
        yield from self.compose_header()
        with Horizontal(id="queue-tables"):
            yield ConsoleTable(id="by-priority", cursor_type="row", zebra_stripes=True)
            yield ConsoleTable(id="by-campaign", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns; side by side when the terminal is wide, one above the other when it is not."""
        self._arrange(self.app.size.width)
        self.query_one("#by-priority", DataTable).add_columns("Priority", "Pending", "Due now", "Oldest")
        self.query_one("#by-campaign", DataTable).add_columns("Campaign", "Pending", "Due now", "Oldest")

    def on_resize(self, event: events.Resize) -> None:
        """Re-arrange the two tables for the new width (the footer is DataScreen's own handler's)."""
        self._arrange(event.size.width)

    def _arrange(self, width: int) -> None:
        self.query_one("#queue-tables").set_class(width < COMPACT_BELOW, "-narrow")

    async def fetch(self) -> PendingGroups:
        """Pending counts by priority and by campaign."""
        return await self.console.data.queue(self.console.clock(), text=self.filter_text)

    def show(self, data: PendingGroups) -> None:
        """Both tables."""
        by_priority, by_campaign, estimated = data
        self.remember("by-campaign", {str(r["campaign_id"]): r for r in by_campaign})
        now = self.console.clock()

        def cells(label: str, r: dict[str, Any]) -> tuple[Any, ...]:
            oldest = r["oldest"]
            age = duration((now - oldest).total_seconds()) if oldest and oldest <= now else "-"
            return (
                label,
                Text(f"~{short(int(r['n']))}" if estimated else f"{r['n']:,}", justify="right"),
                Text(f"~{short(int(r['due']))}" if estimated else f"{r['due']:,}", justify="right"),
                Text(age, justify="right"),
            )

        priority = self.query_one("#by-priority", DataTable)
        # A 1% sample: every figure is marked ~, and a group too small to be sampled is missing.
        note = " (~ estimates from a 1% sample)" if estimated else ""
        priority.border_title = f"Pending by priority{note}"
        fill_table(priority, ((str(r["priority"]), cells(str(r["priority"]), r)) for r in by_priority))
        campaign = self.query_one("#by-campaign", DataTable)
        campaign.border_title = self.subtitle(f"Pending by campaign{note}")
        fill_table(
            campaign,
            ((str(r["campaign_id"]), cells(r["campaign_id"] or "(none)", r)) for r in by_campaign),
        )
