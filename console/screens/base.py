"""What every data screen shares: the header, a `/` filter, refresh workers and read-only checks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Generic, TypeVar

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input
from textual.widgets.data_table import RowDoesNotExist

from console.context import ConsoleContext, Reload, context_of
from console.widgets.banner import Banner
from console.widgets.dialogs import RowScreen
from console.widgets.header import ConsoleHeader
from console.widgets.table import ConsoleTable
from worker.core.terminal import printable

# Terminals narrower than this get the compact footer.
COMPACT_BELOW = 100


# What a screen reads in one go (`fetch`) and puts on screen (`show`): a dataclass, NamedTuple or rows.
DataT = TypeVar("DataT")


class DataScreen(Screen[None], Generic[DataT]):
    """A screen that loads its data in an exclusive async worker and shows it when it arrives."""

    MODE: ClassVar[str] = ""
    # Tables whose changes concern this screen; a notification about any other is ignored.
    TABLES: ClassVar[frozenset[str]] = frozenset()
    # Actions that change the database: hidden in read-only mode.
    MUTATING: ClassVar[frozenset[str]] = frozenset()
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", tooltip="Filter (Enter applies, escape clears)")
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter_text: str | None = None
        # The rows each table shows, by table id and row key, in full: Enter opens one (cells are cut short).
        self.full_rows: dict[str, dict[str, dict[str, Any]]] = {}

    def remember(self, table_id: str, rows: dict[str, dict[str, Any]]) -> None:
        """Keep the full rows a table shows, for Enter."""
        self.full_rows[table_id] = rows

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row opens it in full (screens with their own detail view override this)."""
        table_id = event.data_table.id or ""
        row = self.full_rows.get(table_id, {}).get(str(event.row_key.value))
        if row is not None:
            event.stop()
            title = str(event.data_table.border_title or table_id).split("  [")[0]
            self.app.push_screen(RowScreen(title, row))

    @property
    def console(self) -> ConsoleContext:
        """The running console, by its interface."""
        return context_of(self)

    def compose_header(self) -> ComposeResult:
        """The header every screen starts with, and the health banner under it."""
        yield ConsoleHeader(self.MODE)
        yield Banner()

    def compose_footer(self) -> ComposeResult:
        """The (hidden) filter input and the key footer every screen ends with."""
        yield Input(placeholder="filter: Enter applies, Escape clears", id="filter", classes="hidden")
        narrow = self.app.size.width < COMPACT_BELOW
        yield Footer(compact=narrow, show_command_palette=not narrow)

    def on_resize(self, event: events.Resize) -> None:
        """A narrow terminal gets the compact footer without ^p (help lists it), so every key fits."""
        narrow = event.size.width < COMPACT_BELOW
        for footer in self.query(Footer):
            footer.compact = narrow
            footer.show_command_palette = not narrow

    def on_screen_resume(self) -> None:
        """Fresh data whenever the screen is shown."""
        self.reload()

    def on_reload(self, message: Reload) -> None:
        """Reload if any of the tables that changed concerns this screen."""
        if message.concerns(self.TABLES):
            self.reload()

    def reload(self) -> None:
        """Read and show this screen's data again (a new page, filter or kind; fresh data)."""
        self._load()

    @work(exclusive=True, group="refresh", exit_on_error=False)
    async def _load(self) -> None:
        load = self.console.begin_load()
        try:
            data = await self.fetch()
            self.show(data)
        except Exception as exc:  # shown, not swallowed: a failed refresh leaves the last data on screen
            self.console.say(f"refresh failed: {exc}".splitlines()[0], severity="error")
            await self.console.wake_waiters()
            return
        await self.console.data_shown(self, load)

    async def fetch(self) -> DataT:
        """Read this screen's data (runs in a worker, never in an event handler)."""
        raise NotImplementedError

    def show(self, data: DataT) -> None:
        """Put freshly read data on screen."""
        raise NotImplementedError

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide every mutating key in read-only mode."""
        return not (action in self.MUTATING and self.console.read_only)

    # --- filter -------------------------------------------------------------------------

    def action_filter(self) -> None:
        """Open the filter input."""
        box = self.query_one("#filter", Input)
        box.remove_class("hidden")
        box.value = self.filter_text or ""
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Apply the filter and return to the table."""
        if event.input.id != "filter":
            return
        self.filter_text = event.value.strip() or None
        self._close_filter()
        self.filter_changed()

    def key_escape(self) -> None:
        """Escape clears the filter, from its input or from the table under it."""
        box = self.query_one("#filter", Input)
        if box.has_focus or self.filter_text:
            self.filter_text = None
            self._close_filter()
            self.filter_changed()

    def _close_filter(self) -> None:
        self.query_one("#filter", Input).add_class("hidden")
        for table in self.query(DataTable):
            table.focus()
            break

    def filter_changed(self) -> None:
        """The filter changed: start again from the first page."""
        self.reload()

    def subtitle(self, text: str) -> str:
        """A table title with the active filter, if any."""
        return f"{text}  [filter: {self.filter_text}]" if self.filter_text else text


def selected_key(table: DataTable[Any]) -> str | None:
    """The row key under the cursor, or None for an empty table."""
    if table.row_count == 0:
        return None
    row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
    return row_key.value


def fill_table(table: DataTable[Any], rows: Iterable[tuple[str, Iterable[Any]]]) -> None:
    """Show rows keyed by id: changed cells are updated in place when the same rows remain, else rebuilt.

    The cursor stays on the same row when that row is still there.
    """
    wanted = [(key, list(cells)) for key, cells in rows]
    if isinstance(table, ConsoleTable):
        wanted = table.order(wanted)
    # DataTable reads a str cell as Rich markup: "[@click=app.quit]" in a bounce's diagnostic would act.
    wanted = [(key, [literal(cell) for cell in cells]) for key, cells in wanted]
    with table.app.batch_update():
        if [key for key, _ in wanted] == [str(k.value) for k in table.rows]:
            columns = list(table.columns)
            for key, cells in wanted:
                current = table.get_row(key)
                for column, (old, new) in zip(columns, zip(current, cells, strict=False), strict=False):
                    if _plain(old) != _plain(new) or str(getattr(old, "style", "")) != str(
                        getattr(new, "style", "")
                    ):
                        table.update_cell(key, column, new, update_width=True)
            return
        current_key = selected_key(table)
        cursor_row = table.cursor_row
        table.clear()
        for key, cells in wanted:
            table.add_row(*cells, key=key)
        if table.row_count == 0:
            return
        if current_key is not None:
            try:
                table.move_cursor(row=table.get_row_index(current_key), animate=False, scroll=True)
                return
            except RowDoesNotExist:
                pass  # the row is gone: keep the cursor's position instead
        table.move_cursor(row=min(cursor_row, table.row_count - 1), animate=False)


def literal(cell: Any) -> Any:
    """A str cell as Text shown exactly as written (no markup, control characters escaped); others as given."""
    return Text(printable(cell)) if isinstance(cell, str) else cell


def _plain(value: Any) -> str:
    return value.plain if isinstance(value, Text) else str(value)
