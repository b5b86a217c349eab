"""Accounts: user accounts by lifecycle status; suspend, unsuspend and resend activation."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from console.queries import Page
from console.screens.base import DataScreen, fill_table, selected_key
from console.widgets.cells import ago, masked, status_cell
from console.widgets.table import ConsoleTable
from worker.core.results import ActionResult

STATUS_FILTERS: tuple[str | None, ...] = (None, "provisioned", "active", "suspended")


class AccountsScreen(DataScreen[Page]):
    """Accounts a page at a time by id, filtered by status (f) or text (/)."""

    MODE = "accounts"
    TITLE = "Accounts"
    TABLES = frozenset({"accounts", "tokens"})
    MUTATING = frozenset({"suspend", "unsuspend", "resend"})
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "suspend", "Suspend"),
        Binding("u", "unsuspend", "Unsuspend"),
        Binding("a", "resend", "Resend", tooltip="Resend activation to the selected provisioned account"),
        Binding("f", "cycle_status", "Status", tooltip="Show all, provisioned, active or suspended accounts"),
        Binding("right_square_bracket", "page(1)", "Next page", show=False),
        Binding("left_square_bracket", "page(-1)", "Prev page", show=False),
        *DataScreen.BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.status: str | None = None
        self.after: int | None = None
        self.previous: list[int | None] = []
        self.page = Page(rows=[], more=False)
        self.with_locale = True

    def compose(self) -> ComposeResult:
        """One table."""
        yield from self.compose_header()
        yield ConsoleTable(id="accounts", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        # Below 100 columns the locale gives way, so the rest fits without scrolling sideways.
        self.with_locale = self.app.size.width >= 100
        self.query_one("#accounts", DataTable).add_columns(
            "ID", "Email", "Login", "Status", "Since", "Activated", *(["Locale"] if self.with_locale else [])
        )

    async def fetch(self) -> Page:
        """The current page of the current status."""
        return await self.console.data.accounts(self.status, self.after, text=self.filter_text)

    def show(self, data: Page) -> None:
        """Rows keyed by account id."""
        self.page = data
        self.remember("accounts", {str(r["id"]): r for r in data.rows})
        now = self.console.clock()
        counts: dict[str, int] = data.extra.get("counts", {})
        limit = self.console.data.exact_limit
        summary = "  ".join(
            f"{s} {limit:,}+" if counts.get(s, 0) > limit else f"{s} {counts.get(s, 0):,}"
            for s in STATUS_FILTERS
            if s
        )
        table = self.query_one("#accounts", DataTable)
        which = self.status or "all"
        more = ", ] next" if data.more else ""
        back = ", [ back" if self.previous else ""
        table.border_title = self.subtitle(
            f"Accounts: {which}, page {len(self.previous) + 1}{more}{back}  ({summary})"
        )
        fill_table(
            table,
            (
                (
                    str(r["id"]),
                    (
                        Text(str(r["id"]), justify="right"),
                        masked(r["email"]),
                        r["login"],
                        status_cell(str(r["status"])),
                        ago(r["status_changed_at"], now),
                        ago(r["activated_at"], now),
                        *([r["locale"]] if self.with_locale else []),
                    ),
                )
                for r in data.rows
            ),
        )

    def filter_changed(self) -> None:
        """A new filter starts at the first page."""
        self.after, self.previous = None, []
        self.reload()

    def action_cycle_status(self) -> None:
        """All, provisioned, active, suspended, all, ..."""
        self.status = STATUS_FILTERS[(STATUS_FILTERS.index(self.status) + 1) % len(STATUS_FILTERS)]
        self.filter_changed()

    def action_page(self, step: int) -> None:
        """Next or previous page by id."""
        if step > 0 and self.page.more and self.page.rows:
            self.previous.append(self.after)
            self.after = int(self.page.rows[-1]["id"])
        elif step < 0 and self.previous:
            self.after = self.previous.pop()
        else:
            return
        self.reload()

    def _selected(self) -> list[int]:
        key = selected_key(self.query_one("#accounts", DataTable))
        if key is None:
            self.console.say("no account selected", severity="warning")
        return [] if key is None else [int(key)]

    def action_suspend(self) -> None:
        """Suspend the selected account."""
        actions = self.console.actions
        if ids := self._selected():
            self.console.perform(
                lambda conn: _accounts(actions.suspend_accounts(conn, ids), "suspended"), what="suspend"
            )

    def action_unsuspend(self) -> None:
        """Lift the selected account's suspension."""
        actions = self.console.actions
        if ids := self._selected():
            self.console.perform(
                lambda conn: _accounts(actions.unsuspend_accounts(conn, ids), "unsuspended"), what="unsuspend"
            )

    def action_resend(self) -> None:
        """Issue the selected (provisioned) account a fresh activation token; the mailer sends it."""
        settings, actions = self.console.settings, self.console.actions
        if ids := self._selected():
            self.console.perform(
                lambda conn: _accounts(
                    actions.resend_activation(conn, ids, settings), "sent a new activation token to"
                ),
                what="resend activation",
            )


def _accounts(result: ActionResult, verb: str) -> str:
    """The worker's summary, speaking of accounts rather than emails."""
    return result.summary(verb).replace("email(s)", "account(s)")
