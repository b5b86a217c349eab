"""Failures: failed and retrying email, a keyset page at a time; retry, cancel, and each email's history."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from console.queries import Page
from console.screens.base import DataScreen, fill_table, selected_key
from console.screens.detail import EmailDetailScreen
from console.widgets.cells import ago, masked, one_line, until
from console.widgets.dialogs import ConfirmScreen

KINDS = ("failed", "retrying")


class FailuresScreen(DataScreen):
    """Every failed and retrying email, newest failure first, never loaded all at once."""

    MODE = "failures"
    TITLE = "Failures"
    TABLES = frozenset({"email_queue", "send_logs"})
    MUTATING = frozenset({"retry", "retry_many", "cancel", "mark"})
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "detail", "Detail"),
        Binding("r", "retry", "Retry"),
        Binding("space", "mark", "Mark"),
        Binding("R", "retry_many", "Retry marked/all"),
        Binding("c", "cancel", "Cancel"),
        Binding("t", "toggle_kind", "Failed/retrying"),
        Binding("right_square_bracket", "page(1)", "Next page"),
        Binding("left_square_bracket", "page(-1)", "Prev page"),
        *DataScreen.BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.kind = "failed"
        self.marked: set[int] = set()
        # Keys of the pages before the one shown; the shown page starts after `self.after`.
        self.after: tuple[datetime, int] | None = None
        self.previous: list[tuple[datetime, int] | None] = []
        self.page: Page = Page(rows=[], more=False)

    def compose(self) -> ComposeResult:
        """One table of emails."""
        yield from self.compose_header()
        yield DataTable(id="failures", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        table = self.query_one("#failures", DataTable)
        table.add_column(" ", key="mark", width=1)
        table.add_column("ID", key="id")
        table.add_column("Recipient", key="recipient")
        table.add_column("Subject", key="subject")
        table.add_column("Error", key="error")
        table.add_column("Tries", key="tries")
        table.add_column("Next retry" if self.kind == "retrying" else "Failed", key="when")

    async def fetch(self) -> Page:
        """The current page."""
        return await self.console.data.failures(self.kind, self.after, text=self.filter_text)

    def show(self, data: Any) -> None:
        """Rows keyed by email id; marks survive refreshes."""
        assert isinstance(data, Page)
        self.page = data
        now = self.console.clock()
        # Subject and error share what the fixed columns leave, so Tries and the time stay in view.
        room = max(24, self.app.size.width - 62)
        subject_width, error_width = room * 2 // 5, room - room * 2 // 5
        table = self.query_one("#failures", DataTable)
        number = len(self.previous) + 1
        more = ", more follow" if data.more else ""
        marked = f", {len(self.marked)} marked" if self.marked else ""
        table.border_title = self.subtitle(
            f"{self.kind.capitalize()} email, page {number} ({len(data.rows)} shown{more}{marked})"
        )
        table.columns[ColumnKey("when")].label = Text("Next retry" if self.kind == "retrying" else "Failed")
        fill_table(
            table,
            (
                (
                    str(r["id"]),
                    (
                        Text("●", style="bold magenta") if int(r["id"]) in self.marked else "",
                        Text(str(r["id"]), justify="right"),
                        masked(r["recipient_email"]),
                        one_line(r["subject"], subject_width),
                        one_line(r["last_error"], error_width),
                        f"{r['retry_count']}/{r['max_retries']}",
                        until(r["next_retry_at"] or r["scheduled_for"], now)
                        if self.kind == "retrying"
                        else ago(r["finished_at"], now),
                    ),
                )
                for r in data.rows
            ),
        )

    def _selected(self) -> int | None:
        key = selected_key(self.query_one("#failures", DataTable))
        return int(key) if key is not None else None

    def filter_changed(self) -> None:
        """A new filter starts at the first page."""
        self.after, self.previous = None, []
        self.reload()

    # --- navigation ---------------------------------------------------------------------

    def action_toggle_kind(self) -> None:
        """Switch between failed and retrying email."""
        self.kind = KINDS[(KINDS.index(self.kind) + 1) % len(KINDS)]
        self.after, self.previous, self.marked = None, [], set()
        self.reload()

    def action_page(self, step: int) -> None:
        """Next or previous page by key, never by offset."""
        if step > 0 and self.page.more and self.page.rows:
            last = self.page.rows[-1]
            key = last["finished_at"] if self.kind == "failed" else last["scheduled_for"]
            self.previous.append(self.after)
            self.after = (key, int(last["id"]))
        elif step < 0 and self.previous:
            self.after = self.previous.pop()
        else:
            return
        self.reload()

    def action_detail(self) -> None:
        """Open the selected email with its send-log history."""
        email_id = self._selected()
        if email_id is not None:
            self.app.push_screen(EmailDetailScreen(email_id))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row opens its detail."""
        event.stop()
        self.action_detail()

    # --- actions ------------------------------------------------------------------------

    def action_mark(self) -> None:
        """Mark or unmark the selected email for R / c."""
        email_id = self._selected()
        if email_id is None:
            return
        self.marked ^= {email_id}
        table = self.query_one("#failures", DataTable)
        table.update_cell(
            str(email_id), "mark", Text("●", style="bold magenta") if email_id in self.marked else ""
        )
        table.action_cursor_down()

    def action_retry(self) -> None:
        """Retry the selected email now."""
        from worker.queue import retry

        email_id = self._selected()
        if email_id is None:
            return
        self.console.perform(lambda conn: retry(conn, [email_id]).summary("retried"), what="retry")

    @work(group="confirm")
    async def action_retry_many(self) -> None:
        """Retry the marked emails, or every failed email when none is marked (asks first)."""
        from worker.queue import retry, retry_all_failed

        ids = sorted(self.marked)
        question = (
            f"Retry the {len(ids)} marked email(s)?"
            if ids
            else "Retry EVERY failed email? They all go back to the queue with a fresh retry budget."
        )
        if not await self.app.push_screen_wait(ConfirmScreen(question, confirm="Retry")):
            return
        self.marked = set()
        if ids:
            self.console.perform(lambda conn: retry(conn, ids).summary("retried"), what="retry")
        else:
            self.console.perform(lambda conn: retry_all_failed(conn).summary("retried"), what="retry all")

    @work(group="confirm")
    async def action_cancel(self) -> None:
        """Cancel the marked emails, or the selected one (asks first)."""
        from worker.queue import cancel

        ids = sorted(self.marked) or ([e] if (e := self._selected()) is not None else [])
        if not ids:
            return
        question = f"Cancel {len(ids)} email(s)? They will not be sent." + (
            f" (email {ids[0]})" if len(ids) == 1 else ""
        )
        if not await self.app.push_screen_wait(
            ConfirmScreen(question, confirm="Cancel email", destructive=True)
        ):
            return
        self.marked -= set(ids)
        self.console.perform(lambda conn: cancel(conn, ids).summary("cancelled"), what="cancel")
