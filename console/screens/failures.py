"""Failures: failed and retrying email in one list, a keyset page at a time; retry, cancel, each email's history."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from console.queries import FAILURE_KINDS, FailureKey, Page, failure_key
from console.screens.base import DataScreen, fill_table, selected_key
from console.screens.confirm import confirm_cancel, confirm_retry
from console.screens.detail import EmailDetailScreen
from console.widgets.cells import ago, masked, one_line, status_cell, tries, until
from console.widgets.table import ConsoleTable

WIDE = 100
SHOWING = {"all": "Failed and retrying email", "failed": "Failed email", "retrying": "Retrying email"}


class FailuresScreen(DataScreen[Page]):
    """Every failed email (newest failure first), then every retrying one (next attempt first), a page at a time.

    `t` narrows the list to failed or retrying email and back. `r` retries a failed email; a retrying
    one is already on its way (the worker's retry takes failed email only), which `r` says.
    """

    MODE = "failures"
    TITLE = "Failures"
    TABLES = frozenset({"email_queue", "send_logs"})
    MUTATING = frozenset({"retry", "retry_many", "cancel", "mark"})
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "detail", "Detail", tooltip="Open the email with its send-log history"),
        Binding("r", "retry", "Retry", tooltip="Retry the selected failed email (asks)"),
        Binding("space", "mark", "Mark", tooltip="Mark or unmark the selected email for R and c"),
        Binding(
            "R",
            "retry_many",
            "Retry many",
            tooltip="Retry marked failed email, or all failed (asks)",
        ),
        Binding("c", "cancel", "Cancel", tooltip="Cancel the marked email, or the selected one (asks)"),
        Binding("t", "toggle_kind", "Show", tooltip="Show all, only failed, or only retrying email"),
        Binding("right_square_bracket", "page(1)", "Next page", show=False),
        Binding("left_square_bracket", "page(-1)", "Prev page", show=False),
        *DataScreen.BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.kind = "all"
        # Marked emails and whether each was failed or retrying when marked (R retries the failed ones).
        self.marked: dict[int, str] = {}
        # Keys of the pages before the one shown; the shown page starts after `self.after`.
        self.after: FailureKey | None = None
        self.previous: list[FailureKey | None] = []
        self.page: Page = Page(rows=[], more=False)
        self.with_subject = True

    def compose(self) -> ComposeResult:
        """One table of emails."""
        yield from self.compose_header()
        yield ConsoleTable(id="failures", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        table = self.query_one("#failures", DataTable)
        # Below 100 columns the subject gives way to the error (Enter shows both in full).
        self.with_subject = self.app.size.width >= WIDE
        table.add_column(" ", key="mark", width=1)
        table.add_column("ID", key="id")
        table.add_column("Status", key="status")
        table.add_column("Recipient", key="recipient")
        if self.with_subject:
            table.add_column("Subject", key="subject")
        table.add_column("Error", key="error")
        table.add_column("Tries", key="tries")
        table.add_column("When", key="when")

    async def fetch(self) -> Page:
        """The current page."""
        return await self.console.data.failures(self.kind, self.after, text=self.filter_text)

    def show(self, data: Page) -> None:
        """Rows keyed by email id; marks survive refreshes."""
        self.page = data
        for r in data.rows:  # a marked email may have moved on (retrying ran out and failed, or the reverse)
            if int(r["id"]) in self.marked:
                self.marked[int(r["id"])] = str(r["kind"])
        now = self.console.clock()
        # Subject and error share what the fixed columns leave, so Tries and the time stay in view.
        room = max(12, self.app.size.width - (67 if self.with_subject else 64))
        subject_width = room * 2 // 5 if self.with_subject else 0
        error_width = room - subject_width
        table = self.query_one("#failures", DataTable)
        number = len(self.previous) + 1
        more = ", ] next" if data.more else ""
        back = ", [ back" if self.previous else ""
        marked = f", {len(self.marked)} marked" if self.marked else ""
        counts = data.extra.get("counts", {})
        limit = self.console.data.exact_limit
        total = ", ".join(
            f"{limit:,}+ {k}" if int(counts[k]) > limit else f"{int(counts[k]):,} {k}"
            for k in ("failed", "retrying")
            if k in counts and self.kind in ("all", k)
        )
        table.border_title = self.subtitle(
            f"{SHOWING[self.kind]} ({total}): page {number}{more}{back}{marked}"
        )
        fill_table(
            table,
            (
                (
                    str(r["id"]),
                    (
                        Text("●", style="bold magenta") if int(r["id"]) in self.marked else "",
                        Text(str(r["id"]), justify="right"),
                        status_cell(str(r["kind"])),
                        masked(r["recipient_email"]),
                        *([one_line(r["subject"], subject_width)] if self.with_subject else []),
                        one_line(r["last_error"], error_width),
                        tries(str(r["status"]), int(r["retry_count"]), int(r["max_retries"])),
                        Text(until(r["scheduled_for"], now), style="yellow")
                        if r["kind"] == "retrying"
                        else ago(r["finished_at"], now),
                    ),
                )
                for r in data.rows
            ),
        )

    def _selected(self) -> int | None:
        key = selected_key(self.query_one("#failures", DataTable))
        return int(key) if key is not None else None

    def _row(self, email_id: int) -> dict[str, Any] | None:
        return next((r for r in self.page.rows if int(r["id"]) == email_id), None)

    def filter_changed(self) -> None:
        """A new filter starts at the first page."""
        self.after, self.previous = None, []
        self.reload()

    # --- navigation ---------------------------------------------------------------------

    def action_toggle_kind(self) -> None:
        """Show failed and retrying email, only failed, only retrying, then both again."""
        self.kind = FAILURE_KINDS[(FAILURE_KINDS.index(self.kind) + 1) % len(FAILURE_KINDS)]
        self.after, self.previous, self.marked = None, [], {}
        self.reload()

    def action_page(self, step: int) -> None:
        """Next or previous page by key, never by offset."""
        if step > 0 and self.page.more and self.page.rows:
            self.previous.append(self.after)
            self.after = failure_key(self.page.rows[-1])
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
        row = self._row(email_id) if email_id is not None else None
        if email_id is None or row is None:
            return
        if self.marked.pop(email_id, None) is None:
            self.marked[email_id] = str(row["kind"])
        table = self.query_one("#failures", DataTable)
        table.update_cell(
            str(email_id), "mark", Text("●", style="bold magenta") if email_id in self.marked else ""
        )
        table.action_cursor_down()

    @work(group="confirm")
    async def action_retry(self) -> None:
        """Retry the selected failed email (asks, saying whether it will be suppressed again)."""
        email_id = self._selected()
        row = self._row(email_id) if email_id is not None else None
        if email_id is None or row is None:
            self.console.say("no email selected", severity="warning")
            return
        if row["kind"] == "retrying":
            when = until(row["scheduled_for"], self.console.clock())
            self.console.say(
                f"email {email_id} is already being retried (next attempt {when}); r retries failed email",
                severity="warning",
            )
            return
        await confirm_retry(self, [email_id])

    @work(group="confirm")
    async def action_retry_many(self) -> None:
        """Retry the marked failed emails, or every failed email when none is marked (asks first)."""
        ids = sorted(i for i, kind in self.marked.items() if kind == "failed")
        retrying = len(self.marked) - len(ids)
        if self.marked and not ids:
            self.console.say(
                f"the {retrying} marked email(s) are already being retried; R retries failed email",
                severity="warning",
            )
            return
        aside = ""
        if retrying:
            aside = f" {retrying} marked email{'' if retrying == 1 else 's'} already being retried"
            aside += f" {'is' if retrying == 1 else 'are'} left as is."
        if await confirm_retry(self, ids or None, aside=aside):
            self.marked = {}

    @work(group="confirm")
    async def action_cancel(self) -> None:
        """Cancel the marked emails, or the selected one (asks first)."""
        ids = sorted(self.marked) or ([e] if (e := self._selected()) is not None else [])
        if not ids:
            self.console.say("no email selected", severity="warning")
            return
        if await confirm_cancel(self, ids):
            for email_id in ids:
                self.marked.pop(email_id, None)
