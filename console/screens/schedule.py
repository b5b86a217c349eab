"""Schedule: events due in the next 24 hours, and recently missed, failed or retrying events."""

from __future__ import annotations

from datetime import UTC

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable

from console.queries import ScheduledEvents
from console.screens.base import DataScreen, fill_table
from console.widgets.cells import one_line, status_cell, until
from console.widgets.table import ConsoleTable


class ScheduleScreen(DataScreen[ScheduledEvents]):
    """What the scheduler will do next, and what it could not do."""

    MODE = "schedule"
    TITLE = "Schedule"
    TABLES = frozenset({"events", "people"})

    def compose(self) -> ComposeResult:
        """Two tables."""
        yield from self.compose_header()
        yield ConsoleTable(id="due", cursor_type="row", zebra_stripes=True)
        yield ConsoleTable(id="trouble", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        self.query_one("#due", DataTable).add_columns(
            "Due (UTC)", "In", "Local time", "Time zone", "Person", "Event"
        )
        self.query_one("#trouble", DataTable).add_columns(
            "Status", "Due (UTC)", "Person", "Event", "Retries", "Reason"
        )

    async def fetch(self) -> ScheduledEvents:
        """Due and troubled events."""
        return await self.console.data.schedule(self.console.clock(), text=self.filter_text)

    def show(self, data: ScheduledEvents) -> None:
        """Both tables, keyed by event id."""
        due, trouble = data
        self.remember("due", {str(r["id"]): r for r in due})
        self.remember("trouble", {str(r["id"]): r for r in trouble})
        now = self.console.clock()
        due_table = self.query_one("#due", DataTable)
        due_table.border_title = self.subtitle(f"Due in the next 24 hours ({len(due)})")
        fill_table(
            due_table,
            (
                (
                    str(r["id"]),
                    (
                        r["due_at"].astimezone(UTC).strftime("%m-%d %H:%M"),
                        Text(until(r["due_at"], now), style="yellow" if r["due_at"] <= now else ""),
                        r["local_due_at"].strftime("%m-%d %H:%M"),
                        r["time_zone"],
                        f"{r['first_name']} {r['last_name']}",
                        r["event_type"],
                    ),
                )
                for r in due
            ),
        )
        trouble_table = self.query_one("#trouble", DataTable)
        trouble_table.border_title = self.subtitle(
            f"Missed, failed and retrying, last 30 days ({len(trouble)})"
        )
        fill_table(
            trouble_table,
            (
                (
                    str(r["id"]),
                    (
                        status_cell(str(r["status"])),
                        r["due_at"].astimezone(UTC).strftime("%m-%d %H:%M"),
                        f"{r['first_name']} {r['last_name']}",
                        r["event_type"],
                        Text(f"{r['retry_count']}/3" if r["retry_count"] else "-", justify="right"),
                        one_line(r["failure_reason"], 50),
                    ),
                )
                for r in trouble
            ),
        )
