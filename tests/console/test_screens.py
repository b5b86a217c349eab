"""What the screens show and how they fail: the email detail, filters that search past the first page, errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from textual.widgets import DataTable

from console.app import MailroomConsole
from console.screens.detail import EmailDetailScreen
from console.widgets.header import ConsoleHeader
from tests.console.helpers import WAIT, fields_text, noticed, open_screen, panel_text, row_keys, shown_after


def divide_by_zero(conn: psycopg.Connection[Any]) -> str:
    """An action with a bug in it."""
    rows = conn.execute("SELECT 0 AS zero").fetchall()
    return str(1 // len(rows[1:]))


async def test_email_detail_has_the_header_and_follows_changes_made_elsewhere(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        await shown_after(app, pilot, "enter")
        assert isinstance(app.screen, EmailDetailScreen)
        header = app.screen.query_one(ConsoleHeader)
        assert "mailroom@test" in str(header.render()) and "● live" in str(header.render())
        assert "failed" in fields_text(app)
        with psycopg.connect(seeded_url) as other:
            other.execute(
                "UPDATE mailroom.email_queue SET status = 'pending', retry_count = 0, scheduled_for = now()"
                " WHERE id = 1012"
            )
        assert await app.wait_until_shown(lambda: "pending" in fields_text(app), WAIT)


async def test_an_email_detail_that_cannot_be_read_says_why(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        with psycopg.connect(seeded_url) as other:
            other.execute("ALTER TABLE mailroom.send_logs RENAME TO send_logs_elsewhere")
        await pilot.press("enter")
        assert await app.wait_until_shown(noticed(app, 'relation "mailroom.send_logs" does not exist'), WAIT)
        assert ("error", next(t for _, t in app.notices if "send_logs" in t)) in app.notices
        assert "could not be read" in fields_text(app)


async def test_an_action_that_fails_unexpectedly_is_reported_not_swallowed(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)):
        assert await app.wait_until_shown(lambda: app.refreshes > 0, WAIT)
        app.perform(divide_by_zero, what="divide")
        assert await app.wait_until_shown(
            noticed(app, "divide failed: integer division or modulo by zero"), WAIT
        )
    assert app.notices[-1][0] == "error"


async def test_overview_filter_finds_a_document_beyond_the_few_it_shows(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    with psycopg.connect(seeded_url) as conn:
        # Eight newer incomplete documents push nda-2026 out of the overview's top eight.
        conn.execute(
            "INSERT INTO mailroom.documents (doc_id, title, created_at)"
            " SELECT 'policy-' || g, 'Policy ' || g, now() + make_interval(mins => g) FROM generate_series(1, 8) g"
        )
        conn.execute(
            "INSERT INTO mailroom.expected_signers (doc_id, email, name)"
            " SELECT 'policy-' || g, 'ada@example.com', 'Ada' FROM generate_series(1, 8) g"
        )
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await app.wait_until_shown(lambda: app.refreshes > 0, WAIT)
        assert "nda-2026" not in panel_text(app, "documents")
        await pilot.press("slash", *"nda", "enter")
        assert await app.wait_until_shown(lambda: "nda-2026" in panel_text(app, "documents"), WAIT)


async def test_queue_and_schedule_filters_search_the_database_not_the_rows_shown(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    with psycopg.connect(seeded_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, campaign_id)"
            " SELECT 'bulk' || c || '-' || n || '@example.com', 'Hello', 'body', 'bulk-' || c"
            " FROM generate_series(1, 50) c CROSS JOIN generate_series(1, 20) n"
        )
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        # Fifty bigger campaigns push spring-sale out of the fifty listed.
        await open_screen(app, pilot, "7")
        assert "spring-sale" not in row_keys(app, "by-campaign")
        await pilot.press("slash", *"spring", "enter")
        assert await app.wait_until_shown(lambda: row_keys(app, "by-campaign") == ["spring-sale"], WAIT)
        # A page of one due event: the filter still finds the other one.
        app.data.page_size = 1
        await open_screen(app, pilot, "6")
        table = app.screen.query_one("#due", DataTable)
        assert [str(table.get_row_at(i)[4]) for i in range(table.row_count)] == ["Ada Lovelace"]
        await pilot.press("slash", *"Turing", "enter")
        assert await app.wait_until_shown(
            lambda: [str(table.get_row_at(i)[4]) for i in range(table.row_count)] == ["Alan Turing"], WAIT
        )
