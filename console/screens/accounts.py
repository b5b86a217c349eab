"""Accounts: user accounts by lifecycle status; suspend, unsuspend and resend activation."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from console.queries import Page
from console.screens.base import DataScreen, fill_table, selected_key
from console.widgets.cells import ago, masked, status_cell

STATUS_FILTERS: tuple[str | None, ...] = (None, "provisioned", "active", "suspended")


def lifecycle_action(name: str) -> Callable[..., Any]:
    """A function of `worker.lifecycle` by name; RuntimeError when this version does not have it."""
    try:
        module = importlib.import_module("worker.lifecycle")
    except ImportError:
        raise RuntimeError("worker.lifecycle is not available in this version") from None
    function: Callable[..., Any] | None = getattr(module, name, None)
    if not callable(function):
        raise RuntimeError(f"worker.lifecycle.{name} is not available in this version")
    return function


class AccountsScreen(DataScreen):
    """Accounts a page at a time by id, filtered by status (f) or text (/)."""

    MODE = "accounts"
    TITLE = "Accounts"
    TABLES = frozenset({"accounts", "tokens"})
    MUTATING = frozenset({"suspend", "unsuspend", "resend"})
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "suspend", "Suspend"),
        Binding("u", "unsuspend", "Unsuspend"),
        Binding("a", "resend", "Resend activation"),
        Binding("f", "cycle_status", "Status filter"),
        Binding("right_square_bracket", "page(1)", "Next page"),
        Binding("left_square_bracket", "page(-1)", "Prev page"),
        *DataScreen.BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.status: str | None = None
        self.after: int | None = None
        self.previous: list[int | None] = []
        self.page = Page(rows=[], more=False)

    def compose(self) -> ComposeResult:
        """One table."""
        yield from self.compose_header()
        yield DataTable(id="accounts", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        self.query_one("#accounts", DataTable).add_columns(
            "ID", "Email", "Login", "Status", "Since", "Activated", "Locale"
        )

    async def fetch(self) -> Page:
        """The current page of the current status."""
        return await self.console.data.accounts(self.status, self.after, text=self.filter_text)

    def show(self, data: Any) -> None:
        """Rows keyed by account id."""
        assert isinstance(data, Page)
        self.page = data
        now = self.console.clock()
        counts: dict[str, int] = data.extra.get("counts", {})
        summary = "  ".join(f"{s} {counts.get(s, 0)}" for s in STATUS_FILTERS if s)
        table = self.query_one("#accounts", DataTable)
        which = self.status or "all"
        table.border_title = self.subtitle(f"Accounts: {which}, page {len(self.previous) + 1}  ({summary})")
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
                        r["locale"],
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

    def _act(self, function: str, verb: str) -> None:
        key = selected_key(self.query_one("#accounts", DataTable))
        if key is None:
            return
        account_id = int(key)

        def act(conn: Any) -> str:
            result = lifecycle_action(function)(conn, [account_id])
            return str(result.summary(verb))

        self.console.perform(act, what=verb)

    def action_suspend(self) -> None:
        """Suspend the selected account."""
        self._act("suspend_accounts", "suspended")

    def action_unsuspend(self) -> None:
        """Unsuspend the selected account."""
        self._act("unsuspend_accounts", "unsuspended")

    def action_resend(self) -> None:
        """Send the selected account a new activation token."""
        self._act("resend_activation", "resent activation to")
