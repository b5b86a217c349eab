"""The Senders screen shows each sender's hard-bounce and complaint rates over its last deliveries, red past
`mailroom health`'s thresholds, and a complaint arriving tells the operator at once."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from rich.text import Text
from textual.widgets import DataTable

from console.app import MailroomConsole
from console.live import COMPLAINTS
from tests.console.helpers import WAIT, open_screen
from worker.core.webhook_events import WebhookEvent
from worker.producers.bounces import COMPLAINTS_CHANNEL
from worker.producers.bounces.events import apply_events

HARD, SPAM = 5, 6  # the columns on a wide terminal


def _cell(app: MailroomConsole, sender: str, column: int) -> Text:
    value = app.screen.query_one("#senders", DataTable).get_row(sender)[column]
    assert isinstance(value, Text)
    return value


def test_the_console_listens_on_the_channel_the_intake_notifies() -> None:
    assert COMPLAINTS == COMPLAINTS_CHANNEL


async def test_a_complaint_shows_in_the_senders_rates_and_as_a_notice(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(140, 40)) as pilot:
        await open_screen(app, pilot, "3")
        # the seed's primary sender has deliveries and no later reports; backup has never delivered
        assert _cell(app, "primary", HARD).plain == "0.00%" and _cell(app, "backup", SPAM).plain == "-"
        with psycopg.connect(seeded_url) as conn:
            row = conn.execute(
                "SELECT q.id, q.recipient_email FROM mailroom.email_queue q WHERE q.status = 'sent' LIMIT 1"
            ).fetchone()
            assert row is not None
            conn.execute(
                "INSERT INTO mailroom.send_logs (email_id, sender_account_id, recipient_email, attempt, outcome)"
                " SELECT %s, id, %s, 1, 'sent' FROM mailroom.sender_accounts WHERE name = 'primary'",
                row,
            )
            event = WebhookEvent("webhook", row[1], "complaint", "c-1", b"{}", email_id=row[0])
            assert [o.verdict for o in apply_events(conn, [event])] == ["recorded"]
        assert await app.wait_until_shown(lambda: _cell(app, "primary", SPAM).plain != "0.00%", WAIT)
        spam = _cell(app, "primary", SPAM)
        assert spam.plain.endswith("%") and float(spam.plain.rstrip("%")) > 0.3
        assert "red" in str(spam.style)  # past the 0.3% threshold, with enough deliveries to judge
        assert not any("red" in str(_cell(app, name, HARD).style) for name in ("primary", "backup"))
        assert await app.wait_until_shown(
            lambda: any("reported it as spam" in text for _, text in app.notices), WAIT
        )
        [(severity, text)] = [n for n in app.notices if "reported it as spam" in n[1]]
        assert severity == "warning" and f"email {row[0]}" in text and row[1] not in text


async def test_enter_on_a_sender_shows_the_streams_it_serves_and_its_from_domains(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    from console.widgets.dialogs import RowScreen

    with psycopg.connect(seeded_url) as conn:
        conn.execute(
            "UPDATE mailroom.sender_accounts SET streams = '{broadcast,digest}', from_domains = '{news.example.com}'"
            " WHERE name = 'backup'"
        )
    app = make_console(seeded_url)
    async with app.run_test(size=(140, 40)) as pilot:
        await open_screen(app, pilot, "3")
        table = app.screen.query_one("#senders", DataTable)
        table.move_cursor(row=table.get_row_index("backup"))
        await pilot.press("enter")
        assert await app.wait_until_shown(lambda: isinstance(app.screen, RowScreen), WAIT)
        screen = app.screen
        assert isinstance(screen, RowScreen)
        shown = screen.row
        assert shown["streams"] == "broadcast, digest" and shown["from_domains"] == "news.example.com"
