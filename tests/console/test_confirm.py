"""Confirmations that say what will happen, and the same actions from the detail view and the palette."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from textual.widgets import Button

from console.app import MailroomConsole
from console.screens.detail import EmailDetailScreen
from tests.console.helpers import WAIT, asked, email_status, noticed, open_screen, sender_status


async def test_retrying_every_failed_email_warns_how_many_will_be_suppressed_again(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    with psycopg.connect(seeded_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.bounce_list (email, bounce_type) VALUES"
            " ('grace.hopper@example.com', 'hard'), ('alan.turing@example.com', 'complaint'),"
            " ('edsger@example.com', 'soft')"  # a soft bounce does not suppress
        )
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "2")
        dialog = await asked(app, pilot, "R")
        assert dialog.question == (
            "Retry every failed email (12)? They go back to the queue with a fresh retry budget."
            " 4 are to suppressed addresses (bounced or unsubscribed) and will be suppressed again."
        )
        labels = [str(b.label) for b in dialog.query(Button)]
        assert labels == ["Retry", "Keep as is"]
        await pilot.click("#no")
        await pilot.pause()
        assert not app.screen.is_modal
        assert set(email_status(seeded_url, *range(1001, 1013)).values()) == {"failed"}


async def test_suspending_the_last_usable_sender_says_mail_will_wait(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    with psycopg.connect(seeded_url) as conn:
        conn.execute("UPDATE mailroom.sender_accounts SET status = 'paused' WHERE name = 'warming'")
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "3")
        dialog = await asked(app, pilot, "down", "down", "s")
        assert (
            "It is the last usable sender: 10 emails due now will wait until one is resumed."
            in dialog.question
        )
        assert [str(b.label) for b in dialog.query(Button)] == ["Suspend", "Keep as is"]
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "primary is now suspended"), WAIT)
    assert sender_status(seeded_url, "primary") == "suspended"


async def test_the_detail_view_retries_and_cancels_its_email(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "2")
        await pilot.press("enter")
        assert isinstance(app.screen, EmailDetailScreen) and app.screen.email_id == 1012
        dialog = await asked(app, pilot, "r")
        assert dialog.question.startswith("Retry 1 email?")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "retried 1 email(s)"), WAIT)
        assert email_status(seeded_url, 1012) == {1012: "pending"}
        dialog = await asked(app, pilot, "c")
        assert dialog.question == "Cancel 1 email? It will never be sent. 1 was still waiting to be sent."
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "cancelled 1 email(s)"), WAIT)
    assert email_status(seeded_url, 1012) == {1012: "cancelled"}


async def test_the_palette_runs_the_screens_actions_and_retries_every_failed_email(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        await pilot.press("down", "down", "ctrl+p", *"Suspend (s)")
        await pilot.wait_for_scheduled_animations()
        await app.workers.wait_for_complete()
        dialog = await asked(app, pilot, "enter")
        assert dialog.question.startswith("Suspend sender primary?")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "primary is now suspended"), WAIT)
        await pilot.press("ctrl+p", *"Retry every failed")
        await pilot.wait_for_scheduled_animations()
        await app.workers.wait_for_complete()
        dialog = await asked(app, pilot, "enter")
        assert dialog.question.startswith("Retry every failed email (12)?")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "retried 12 email(s)"), WAIT)
    assert sender_status(seeded_url, "primary") == "suspended"
    assert set(email_status(seeded_url, *range(1001, 1013)).values()) == {"pending"}
