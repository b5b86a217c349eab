"""Keys that move, sort, filter and explain, in every table and at 80x24."""

from __future__ import annotations

from collections.abc import Callable

from textual.containers import VerticalScroll
from textual.widgets import DataTable

from console.app import MailroomConsole
from console.widgets.dialogs import HelpScreen, RowScreen
from tests.console.helpers import WAIT, open_screen, row_keys


async def test_vim_and_k9s_keys_move_the_cursor_in_a_table(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "2")
        table = app.screen.query_one("#failures", DataTable)
        assert table.row_count == 16
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == 15
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("end")
        assert table.cursor_row == 15
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.press("pagedown")
        assert table.cursor_row > 1
        await pilot.press("pageup")
        assert table.cursor_row == 0


async def test_o_and_header_clicks_sort_and_the_header_shows_the_sort(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        table = app.screen.query_one("#senders", DataTable)
        labels = lambda: [c.label.plain for c in table.ordered_columns]  # noqa: E731
        await pilot.press("o")  # by the first column, ascending
        assert labels()[0] == "Sender ▲"
        assert row_keys(app, "senders") == ["backup", "low-limit", "primary", "warming"]
        await pilot.press("O")
        assert labels()[0] == "Sender ▼"
        assert row_keys(app, "senders") == ["warming", "primary", "low-limit", "backup"]
        await pilot.press("o")  # the next column: status
        assert labels()[:2] == ["Sender", "Status ▲"]
        sent = next(c for c in table.ordered_columns if c.label.plain.startswith("Sent today"))
        before_sent = table.ordered_columns[: table.ordered_columns.index(sent)]
        x = 1 + sum(c.get_render_width(table) for c in before_sent) + 2  # past the border, into the header
        await pilot.click("#senders", offset=(x, 1))  # the header row (the border is row 0)
        assert sent.label.plain.endswith("▲")
        # By number, not by text: 0/1000 < 25/25 < 171/200 < 412/2000.
        assert row_keys(app, "senders") == ["backup", "low-limit", "warming", "primary"]
        # A refresh keeps the sort.
        begun = app.loads_begun
        app.request_refresh()
        assert await app.wait_until_shown(lambda: app.shown_by.get(app.screen, 0) > begun, WAIT)
        assert row_keys(app, "senders") == ["backup", "low-limit", "warming", "primary"]


async def test_escape_on_the_table_clears_the_filter(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "3")
        await pilot.press("slash", *"prim", "enter")
        assert await app.wait_until_shown(lambda: row_keys(app, "senders") == ["primary"], WAIT)
        assert app.screen.query_one("#senders", DataTable).has_focus
        await pilot.press("escape")
        assert await app.wait_until_shown(lambda: len(row_keys(app, "senders")) == 4, WAIT)
        assert "[filter" not in str(app.screen.query_one("#senders", DataTable).border_title)


async def test_help_lists_the_screens_table_and_global_keys_and_scrolls_at_80x24(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "2")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = {k for k, _ in app.screen.entries}
        assert {"r", "R", "c", "t", "/", "j, down", "g, home", "G, end", "o", "O", "?", "!", "2"} <= keys
        scroll = app.screen.query_one("#help", VerticalScroll)
        assert scroll.max_scroll_y > 0  # longer than 24 lines: it must scroll
        await pilot.press("j", "j", "j")
        assert scroll.scroll_y == 3
        await pilot.press("pagedown")
        assert scroll.scroll_y > 3


async def test_enter_shows_a_cut_value_in_full(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "3")
        await pilot.press("enter")  # backup: its reason has no column at 80 wide
        assert isinstance(app.screen, RowScreen)
        assert app.screen.row["status_reason"] == "maintenance window"
        await pilot.press("escape")
        assert not isinstance(app.screen, RowScreen)
