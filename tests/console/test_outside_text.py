"""Text from outside (an SMTP reply, a subject) is shown exactly as written: never read as markup, never obeyed."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from rich.text import Text
from textual.widgets import DataTable

from console.app import MailroomConsole
from console.screens.detail import EmailDetailScreen
from tests.console.helpers import fields_text, open_screen, shown_after

HOSTILE = "550 [red]fake[/red] [@click=app.quit]quit[/] \x1b]0;pwned\x07\x1b[2J\u202eend"
SHOWN = "550 [red]fake[/red] [@click=app.quit]quit[/] \\x1b]0;pwned\\x07\\x1b[2J\\u202eend"


async def test_a_hostile_last_error_is_shown_literally_in_the_failures_table_and_the_detail(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    with psycopg.connect(seeded_url) as conn:
        conn.execute(
            "UPDATE mailroom.email_queue SET last_error = %s, subject = %s WHERE id BETWEEN 1001 AND 1012",
            (HOSTILE, "[b]Reset[/b] [@click=app.quit]now[/]"),  # the queue refuses controls in a subject
        )
    app = make_console(seeded_url)
    async with app.run_test(size=(200, 40)) as pilot:
        await open_screen(app, pilot, "2")
        table = app.screen.query_one("#failures", DataTable)
        cells = [cell for key in table.rows for cell in table.get_row(key)]
        shown = [cell for cell in cells if isinstance(cell, Text) and "fake" in cell.plain]
        assert shown and all(cell.plain.startswith(SHOWN[: len(cell.plain) - 1]) for cell in shown)
        assert all(not cell.spans for cell in shown)  # no style, no @click action taken from the text
        assert not [c for c in cells if "\x1b" in (c.plain if isinstance(c, Text) else str(c))]
        await shown_after(app, pilot, "enter")
        assert isinstance(app.screen, EmailDetailScreen)
        fields = fields_text(app)
        assert SHOWN in fields and "[b]Reset[/b] [@click=app.quit]now[/]" in fields
        assert "\x1b" not in fields and "\x07" not in fields
        assert app.is_running  # the [@click=app.quit] in the error did nothing
