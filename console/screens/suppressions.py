"""Suppressions: the addresses Mailroom does not mail, each one's history, and lifting one after a confirm."""

from __future__ import annotations

from datetime import UTC
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from console.screens.base import DataScreen, fill_table, selected_key
from console.widgets.cells import one_line
from console.widgets.dialogs import ConfirmScreen, RowScreen
from console.widgets.table import ConsoleTable
from worker.ops.suppressions import HISTORY, LIST, search_pattern


def lift_question(address: str, kinds: list[str]) -> str:
    """What lifting does, said before it is done; a complaint says why it matters."""
    text = (
        f"Lift {', '.join(kinds)} for {address}? Email enqueued from now on is sent to it again;"
        " email already suppressed stays so."
    )
    if "complaint" in kinds:
        text += (
            " This address complained: the recipient reported your email as spam. Mailing it again risks"
            " more complaints and the sender's standing with mailbox providers; lift it only when the"
            " recipient asked to be mailed again."
        )
    return text


class SuppressionsScreen(DataScreen[list[dict[str, Any]]]):
    """The suppression list (`mailroom suppressions list`): `/` filters, Enter shows history, `l` lifts."""

    MODE = "suppressions"
    TITLE = "Suppressions"
    TABLES = frozenset({"bounce_list", "unsubscribe_list", "suppression_events"})
    MUTATING = frozenset({"lift"})
    BINDINGS: ClassVar[list[BindingType]] = [
        *DataScreen.BINDINGS,
        Binding("enter", "history", "History", tooltip="Every event of the selected address"),
        Binding("l", "lift", "Lift", tooltip="Lift the selected address's suppressions (asks first)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, Any]] = {}

    def compose(self) -> ComposeResult:
        """One table."""
        yield from self.compose_header()
        yield ConsoleTable(id="suppressions", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        table = self.query_one("#suppressions", DataTable)
        table.add_columns("Address", "Kind", "Stops", "Since (UTC)", "Times", "Reason")

    async def fetch(self) -> list[dict[str, Any]]:
        """A page of the list, matching the filter (address or reason)."""
        data = self.console.data
        params = {"kind": None, "pattern": search_pattern(self.filter_text), "limit": data.page_size}
        return await data.fetch(LIST, params)

    def show(self, data: list[dict[str, Any]]) -> None:
        """Rows keyed by address and kind (an address on both lists shows twice)."""
        table = self.query_one("#suppressions", DataTable)
        table.border_title = self.subtitle(f"Suppressions: addresses not mailed ({len(data)})")
        self.rows = {f"{r['address']} {r['kind']}": r for r in data}
        fill_table(table, ((key, self._cells(r)) for key, r in self.rows.items()))

    def _cells(self, row: dict[str, Any]) -> tuple[Any, ...]:
        since = row["since"].astimezone(UTC)
        return (
            one_line(row["address"], 40),
            row["kind"],
            row["stops"],
            f"{since:%Y-%m-%d %H:%M}",
            Text(f"{row['times']:,}", justify="right"),
            one_line(row["reason"], 60) or "-",
        )

    def _selected(self) -> dict[str, Any] | None:
        key = selected_key(self.query_one("#suppressions", DataTable))
        return self.rows.get(key) if key is not None else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter: the address's history."""
        event.stop()
        self.action_history()

    @work(group="history", exclusive=True, exit_on_error=False)
    async def action_history(self) -> None:
        """Every event of the selected address, newest first, in a window."""
        row = self._selected()
        if row is None:
            self.console.say("no address selected", severity="warning")
            return
        events = await self.console.data.fetch(HISTORY, {"address": row["address"], "limit": 50})
        shown = {
            f"{e['occurred_at'].astimezone(UTC):%Y-%m-%d %H:%M:%S}": " ".join(
                str(part)
                for part in (e["change"], e["kind"], f"({e['source']})", e["status"] or "", e["reason"] or "")
                if part
            )
            + f" by {e['actor']}"
            for e in events
        }
        await self.app.push_screen(
            RowScreen(f"History of {row['address']}", shown or {"-": "nothing recorded"})
        )

    @work(group="confirm")
    async def action_lift(self) -> None:
        """Lift the selected address's suppressions, after a confirm that states the consequence."""
        row = self._selected()
        if row is None:
            self.console.say("no address selected", severity="warning")
            return
        address = str(row["address"])
        kinds = sorted({str(r["kind"]) for r in self.rows.values() if r["address"] == address})
        question = lift_question(address, kinds)
        if not await self.app.push_screen_wait(ConfirmScreen(question, confirm="Lift", destructive=True)):
            return
        actor = self.console.actor

        def act(conn: Any) -> str:
            from worker.ops.suppressions import remove

            # The operator confirmed after reading the complaint's consequence: that is the --force.
            lifted = remove(conn, address, "lifted from the console", actor, force=True)
            return f"lifted {', '.join(lifted.kinds) or 'nothing'} for {address}"

        self.console.perform(act, what=f"lift {address}")
