"""Console test helpers: open a screen, wait for a confirmation, read tables, cells and panels, read statuses back."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import psycopg
from rich.console import Console
from textual.widgets import DataTable, Static

from console.app import MailroomConsole
from console.widgets.dialogs import ConfirmScreen

# How long a test waits for what it expects to see: a bound, not a duration (waits end as soon as it shows);
# generous, since a fresh-clone run beside another on two cores once took more than 5 s to open a dialog.
WAIT = 30.0


def email_status(url: str, *ids: int) -> dict[int, str]:
    """Status of each email by id."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT id, status FROM mailroom.email_queue WHERE id = ANY(%s)", (list(ids),))
        return {int(i): str(s) for i, s in rows.fetchall()}


def sender_status(url: str, name: str) -> str:
    """Status of one sender account."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status FROM mailroom.sender_accounts WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def row_keys(app: MailroomConsole, table_id: str) -> list[str]:
    """The row keys of a table on the active screen, in display order."""
    table = app.screen.query_one(f"#{table_id}", DataTable)
    return [str(table.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(table.row_count)]


def noticed(app: MailroomConsole, text: str) -> Callable[[], bool]:
    """A predicate: some notification contains `text`."""
    return lambda: any(text in notice for _, notice in app.notices)


async def open_screen(app: MailroomConsole, pilot: Any, key: str) -> None:
    """Press a screen's number key and wait for its data."""
    assert await app.wait_until_shown(lambda: app.live_state == "live" and app.refreshes > 0, WAIT)
    await shown_after(app, pilot, key)


async def shown_after(app: MailroomConsole, pilot: Any, *keys: str) -> None:
    """Press `keys` and wait until the screen then in front shows data it began reading after them: a
    load begun before them (the previous screen's, the previous page's) may land after the keys."""
    begun = app.loads_begun
    await pilot.press(*keys)
    assert await app.wait_until_shown(lambda: app.shown_by.get(app.screen, 0) > begun, WAIT)


async def asked(app: MailroomConsole, pilot: Any, *keys: str) -> ConfirmScreen:
    """Press `keys` and wait for the confirmation they open (it counts in the database first)."""
    await pilot.press(*keys)
    assert await app.wait_until_shown(lambda: isinstance(app.screen, ConfirmScreen), WAIT)
    assert isinstance(app.screen, ConfirmScreen)
    return app.screen


def cell(app: MailroomConsole, table_id: str, row: str, column: int) -> str:
    """The plain text of one cell on the active screen."""
    table = app.screen.query_one(f"#{table_id}", DataTable)
    return str(table.get_row(row)[column])


def panel_text(app: MailroomConsole, panel_id: str) -> str:
    """A Static panel of the active screen as plain text."""
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(app.screen.query_one(f"#{panel_id}", Static).content)
    return console.export_text()


def fields_text(app: MailroomConsole) -> str:
    """The email detail's fields as plain text."""
    return panel_text(app, "email-fields")
