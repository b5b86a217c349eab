"""The console's actions are audited as console:<os user>, and the audit trail screen (key 0) shows them live."""

from __future__ import annotations

import getpass
from collections.abc import Callable

from textual.widgets import DataTable

from console.app import MailroomConsole
from tests.console.helpers import WAIT, asked, noticed, open_screen, row_keys
from tests.ops.helpers import audit_rows


def cell_text(app: MailroomConsole, row: int) -> list[str]:
    """The plain text of one row of the audit table."""
    table = app.screen.query_one("#audit", DataTable)
    return [str(getattr(cell, "plain", cell)) for cell in table.get_row_at(row)]


async def test_a_suspension_from_the_console_is_audited_as_the_console_and_shown_on_the_audit_screen(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        await asked(app, pilot, "down", "down", "s")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "primary is now suspended"), WAIT)
        await open_screen(app, pilot, "0")
        assert app.current_mode == "audit"
        assert await app.wait_until_shown(lambda: len(row_keys(app, "audit")) == 1, WAIT)
        _when, role, actor, action, target, count, detail = cell_text(app, 0)
        assert (actor, action, target, count) == (
            f"console:{getpass.getuser()}",
            "sender.suspend",
            "primary",
            "1",
        )
        assert "from=active" in detail and 'reason="suspended from the console"' in detail and role
    [row] = audit_rows(seeded_url)
    assert (row["action"], row["actor"]) == ("sender.suspend", f"console:{getpass.getuser()}")


async def test_console_retry_and_cancel_are_audited_and_a_new_row_appears_while_the_screen_is_open(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url, actor="console:alice")
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        await asked(app, pilot, "R")  # the confirmation counts first: a "y" pressed before it opens is lost
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "retried 12 email(s)"), WAIT)
        await open_screen(app, pilot, "0")
        assert await app.wait_until_shown(lambda: len(row_keys(app, "audit")) == 1, WAIT)
        assert cell_text(app, 0)[2:6] == ["console:alice", "queue.retry", "every failed email", "12"]
        # Written elsewhere (the command line), the row arrives through LISTEN/NOTIFY, newest first.
        from worker.core.db import connect
        from worker.ops.actions import cancel

        with connect(seeded_url) as conn:
            cancel(conn, [3001, 3002], actor="bob")
        assert await app.wait_until_shown(lambda: len(row_keys(app, "audit")) == 2, WAIT)
        assert cell_text(app, 0)[2:6] == ["bob", "queue.cancel", "emails 3001, 3002", "2"]
    assert [r["actor"] for r in audit_rows(seeded_url)] == ["console:alice", "bob"]


async def test_the_audit_screen_is_in_the_palette_and_the_help(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await app.wait_until_shown(lambda: app.live_state == "live" and app.refreshes > 0, WAIT)
        assert "Audit trail screen" in [c.title for c in app.get_system_commands(app.screen)]
        await open_screen(app, pilot, "0")
        assert (
            app.screen.query_one("#audit", DataTable).border_title
            == "Audit trail: recent operator actions (0)"
        )
        # Narrow: no database role or detail column.
        assert len(app.screen.query_one("#audit", DataTable).columns) == 5
