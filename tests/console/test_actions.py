"""Console actions, driven by keys against the real PostgreSQL: each changes the database and notifies."""

from __future__ import annotations

import io
from collections.abc import Callable

import psycopg
from rich.console import Console
from textual.widgets import DataTable, Static

from console.app import MailroomConsole
from console.screens.detail import EmailDetailScreen
from console.widgets.dialogs import ConfirmScreen, HelpScreen
from tests.console.helpers import (
    WAIT,
    asked,
    email_status,
    noticed,
    open_screen,
    row_keys,
    sender_status,
    shown_after,
)


async def test_r_retries_the_selected_failed_email_and_the_row_leaves(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        assert row_keys(app, "failures")[0] == "1012"
        dialog = await asked(app, pilot, "r")
        assert dialog.question == "Retry 1 email? It goes back to the queue with a fresh retry budget."
        await pilot.press("y")
        assert await app.wait_until_shown(
            lambda: noticed(app, "retried 1 email(s)")() and "1012" not in row_keys(app, "failures"), WAIT
        )
    assert email_status(seeded_url, 1012, 1011) == {1012: "pending", 1011: "failed"}


async def test_space_marks_and_R_retries_the_marked_after_confirmation(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        dialog = await asked(app, pilot, "space", "space", "R")
        assert dialog.question.startswith("Retry 2 emails?")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "retried 2 email(s)"), WAIT)
    assert email_status(seeded_url, 1012, 1011, 1010) == {1012: "pending", 1011: "pending", 1010: "failed"}


RETRYING = ["2001", "2002", "2003", "2004"]


async def test_R_without_marks_retries_every_failed_email(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        assert (await asked(app, pilot, "R")).question.startswith("Retry every failed email (12)?")
        await pilot.press("y")
        # The failed email went back to the queue with a fresh budget; the retrying email stays listed.
        assert await app.wait_until_shown(
            lambda: noticed(app, "retried 12 email(s)")() and row_keys(app, "failures") == RETRYING, WAIT
        )
    assert set(email_status(seeded_url, *range(1001, 1013)).values()) == {"pending"}


async def test_failed_and_retrying_email_share_one_list_paged_by_key(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        app.data.page_size = 5
        await open_screen(app, pilot, "2")
        pages = [row_keys(app, "failures")]
        for _ in range(3):
            await shown_after(app, pilot, "right_square_bracket")
            pages.append(row_keys(app, "failures"))
        assert pages == [
            ["1012", "1011", "1010", "1009", "1008"],
            ["1007", "1006", "1005", "1004", "1003"],
            ["1002", "1001", "2001", "2002", "2003"],
            ["2004"],
        ]
        table = app.screen.query_one("#failures", DataTable)
        assert [str(table.get_row(k)[2]) for k in ("2004",)] == ["retrying"]
        assert "12 failed, 4 retrying" in str(table.border_title)
        await shown_after(app, pilot, "left_square_bracket")
        assert row_keys(app, "failures") == pages[2]
        assert str(table.get_row("1001")[2]) == "failed"


async def test_retrying_email_is_left_to_the_worker_by_r_and_R_but_c_cancels_it(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        table = app.screen.query_one("#failures", DataTable)
        table.move_cursor(row=table.get_row_index("2002"))
        await pilot.press("r")
        assert await app.wait_until_shown(
            noticed(app, "email 2002 is already being retried (next attempt in 14m)"), WAIT
        )
        table.move_cursor(row=0)
        await pilot.press("space")  # 1012, failed
        table.move_cursor(row=table.get_row_index("2001"))
        dialog = await asked(app, pilot, "space", "R")  # 2001, retrying
        assert dialog.question.startswith("Retry 1 email?")
        assert "1 marked email already being retried is left as is" in dialog.question
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "retried 1 email(s)"), WAIT)
        assert await app.wait_until_shown(lambda: "1012" not in row_keys(app, "failures"), WAIT)
        table = app.screen.query_one("#failures", DataTable)
        table.move_cursor(row=table.get_row_index("2001"))
        await asked(app, pilot, "c")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "cancelled 1 email(s)"), WAIT)
    assert email_status(seeded_url, 1012, 2001) == {1012: "pending", 2001: "cancelled"}
    with psycopg.connect(seeded_url) as conn:
        row = conn.execute("SELECT status, retry_count FROM mailroom.email_queue WHERE id = 2002").fetchone()
    assert row == ("pending", 2)  # r left it alone: the worker retries it on schedule


async def test_a_marked_email_that_fails_meanwhile_is_retried_by_R(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        table = app.screen.query_one("#failures", DataTable)
        table.move_cursor(row=table.get_row_index("2001"))
        await pilot.press("space")
        with psycopg.connect(seeded_url) as other:  # the worker gives up on it
            other.execute(
                "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'w',"
                " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '5 minutes' WHERE id = 2001"
            )
            other.execute("UPDATE mailroom.email_queue SET status = 'failed' WHERE id = 2001")
        assert await app.wait_until_shown(lambda: str(table.get_row("2001")[2]) == "failed", WAIT)
        assert (await asked(app, pilot, "R")).question.startswith("Retry 1 email?")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "retried 1 email(s)"), WAIT)
    assert email_status(seeded_url, 2001) == {2001: "pending"}


async def test_c_cancels_only_after_confirmation(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        dialog = await asked(app, pilot, "c")
        assert dialog.destructive
        assert dialog.question == "Cancel 1 email? It will never be sent."
        await pilot.press("n")
        await pilot.pause()
        assert email_status(seeded_url, 1012) == {1012: "failed"}
        await asked(app, pilot, "c")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "cancelled 1 email(s)"), WAIT)
    assert email_status(seeded_url, 1012) == {1012: "cancelled"}


async def test_a_confirmation_holds_the_screen_until_answered(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        await asked(app, pilot, "c")
        # Number keys, help and quit must not act behind an open question.
        await pilot.press("3", "question_mark", "q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.is_running
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert app.current_mode == "failures"
    assert email_status(seeded_url, 1012) == {1012: "failed"}


async def test_enter_opens_the_email_with_its_send_log_history(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        await pilot.press("enter")
        assert isinstance(app.screen, EmailDetailScreen) and app.screen.email_id == 1012
        history = app.screen.query_one("#history", DataTable)
        await pilot.wait_for_scheduled_animations()
        await app.workers.wait_for_complete()
        assert history.row_count == 6
        await pilot.press("escape")
        assert not isinstance(app.screen, EmailDetailScreen)


async def test_filter_and_pages_bound_the_failures_table(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        app.data.page_size = 5
        await open_screen(app, pilot, "2")
        assert row_keys(app, "failures") == ["1012", "1011", "1010", "1009", "1008"]
        await pilot.press("right_square_bracket")
        # The next page, whatever refresh of this one (a notification's) lands first.
        assert await app.wait_until_shown(
            lambda: row_keys(app, "failures") == ["1007", "1006", "1005", "1004", "1003"], WAIT
        )
        await pilot.press("slash", *"spam", "enter")
        assert await app.wait_until_shown(lambda: row_keys(app, "failures") == ["1009", "1005", "1001"], WAIT)
        await pilot.press("t", "t")  # all -> failed -> retrying
        assert await app.wait_until_shown(lambda: row_keys(app, "failures") == [], WAIT)
        await pilot.press("slash", "escape")
        assert await app.wait_until_shown(lambda: row_keys(app, "failures") == RETRYING, WAIT)
        await pilot.press("t")  # -> all again: failed first
        assert await app.wait_until_shown(lambda: row_keys(app, "failures")[0] == "1012", WAIT)


async def test_senders_pause_resume_and_suspend_with_confirmation(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        assert row_keys(app, "senders") == ["backup", "low-limit", "primary", "warming"]
        await pilot.press("down", "down", "p")
        assert await app.wait_until_shown(noticed(app, "primary is now paused"), WAIT)
        assert sender_status(seeded_url, "primary") == "paused"
        dialog = await asked(app, pilot, "u")
        assert (
            dialog.question
            == "Resume sender primary (now paused)? It sends again from now; 10 emails are due."
        )
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "primary is now active"), WAIT)
        dialog = await asked(app, pilot, "s")
        assert dialog.destructive
        assert dialog.question.endswith(
            "Nothing is sent through it until it is resumed. 1 other sender(s) carry on."
        )
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "primary is now suspended"), WAIT)
        assert sender_status(seeded_url, "primary") == "suspended"
        await asked(app, pilot, "s")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "cannot set it suspended"), WAIT)
        assert ("error", next(t for _, t in app.notices if "cannot" in t)) in app.notices


async def test_read_only_hides_and_refuses_every_action(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        shown = {b.binding.key for b in app.screen.active_bindings.values()}
        assert {"r", "R", "c", "space"}.isdisjoint(shown)
        assert "READ-ONLY" in str(app.screen.query_one("#header").render())
        await pilot.press("r", "R", "c")
        assert not isinstance(app.screen, ConfirmScreen)
        await shown_after(app, pilot, "3")
        assert {"p", "s", "u"}.isdisjoint({b.binding.key for b in app.screen.active_bindings.values()})
        await pilot.press("p", "s", "u")
        # Even a direct call is refused by the app.
        app.perform(lambda conn: "changed", what="pause")
        await pilot.pause()
    assert email_status(seeded_url, 1012) == {1012: "failed"}
    assert sender_status(seeded_url, "backup") == "paused"
    assert ("warning", "read-only console: pause is disabled") in app.notices


async def test_help_lists_every_key_of_the_screen(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = " ".join(f"{keys} {description}" for keys, description in app.screen.entries)
        for expected in (
            "R Retry marked failed email, or all failed (asks)",
            "t Show all, only failed, or only retrying email",
            "] Next page",
            "c Cancel",
            "space Mark",
            "/ Filter",
            "q Quit",
            "5 Signatures",
        ):
            assert expected in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_accounts_status_filter_shows_one_status(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "4")
        assert len(row_keys(app, "accounts")) == 12
        await pilot.press("f", "f", "f")  # all -> provisioned -> active -> suspended
        assert await app.wait_until_shown(lambda: row_keys(app, "accounts") == ["4", "8", "12"], WAIT)


def account_state(url: str, account_id: int) -> tuple[str, int]:
    """An account's status and how many activation tokens it has."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT a.status, (SELECT count(*) FROM mailroom.tokens t"
            "                  WHERE t.account_id = a.id AND t.action = 'activation')"
            " FROM mailroom.accounts a WHERE a.id = %s",
            (account_id,),
        ).fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


async def test_accounts_resend_activation_suspend_and_unsuspend(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    status, tokens = account_state(seeded_url, 1)
    assert status == "provisioned"
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "4")
        assert row_keys(app, "accounts")[0] == "1"
        await pilot.press("a")
        assert await app.wait_until_shown(noticed(app, "sent a new activation token to 1 account(s)"), WAIT)
        assert account_state(seeded_url, 1) == ("provisioned", tokens + 1)
        await pilot.press("s")
        assert await app.wait_until_shown(noticed(app, "suspended 1 account(s)"), WAIT)
        assert account_state(seeded_url, 1)[0] == "suspended"
        await pilot.press("u")
        assert await app.wait_until_shown(noticed(app, "unsuspended 1 account(s)"), WAIT)
        assert account_state(seeded_url, 1)[0] == "provisioned"


async def test_m_sends_reminders_after_saying_how_many_will_be_mailed(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "5")
        assert row_keys(app, "documents")[0] == "handbook-v3"
        await pilot.press("m")
        assert await app.wait_until_shown(lambda: isinstance(app.screen, ConfirmScreen), WAIT)
        assert isinstance(app.screen, ConfirmScreen)
        assert "6 signer(s) will be mailed" in app.screen.question
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "handbook-v3: queued 6 reminder(s)"), WAIT)
    with psycopg.connect(seeded_url) as conn:
        logs = conn.execute(
            "SELECT count(*) FROM mailroom.reminder_logs WHERE doc_id = 'handbook-v3'"
        ).fetchone()
        emails = conn.execute(
            "SELECT count(*) FROM mailroom.email_queue WHERE reference_type = 'reminder_log'"
        ).fetchone()
    assert logs == (6,) and emails == (6,)


async def test_command_palette_switches_screens(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await app.wait_until_shown(lambda: app.live_state == "live" and app.refreshes > 0, WAIT)
        await pilot.press("ctrl+p", *"Senders screen")
        await pilot.wait_for_scheduled_animations()
        await app.workers.wait_for_complete()
        await shown_after(app, pilot, "enter")
        assert app.current_mode == "senders"
        assert row_keys(app, "senders") == ["backup", "low-limit", "primary", "warming"]


async def test_counts_past_the_exact_limit_are_capped_or_marked_as_estimates(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        app.data.exact_limit = 10  # 44 pending and 12 failed are "large" now; 4 retrying are not
        await open_screen(app, pilot, "2")
        await shown_after(app, pilot, "1")
        console = Console(width=60, record=True, file=io.StringIO())
        console.print(app.screen.query_one("#depth", Static).content)
        depth = console.export_text()
        # Too small a table to sample: only the bound is known, and said; retrying stays exact.
        lines = {" ".join(line.split()[:-1]): line.split()[-1] for line in depth.splitlines() if line.strip()}
        assert (lines["pending"], lines["failed"], lines["scheduled later"]) == ("≥10", "≥10", "≥10")
        assert (lines["retrying"], lines["due now"]) == ("4", "10")
        await shown_after(app, pilot, "7")
        assert "~ estimates from a 1% sample" in str(app.screen.query_one("#by-priority").border_title)


async def test_filter_on_the_overview_narrows_senders_and_documents(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await app.wait_until_shown(lambda: app.live_state == "live" and app.refreshes > 0, WAIT)
        assert len(row_keys(app, "ov-senders")) == 4
        await pilot.press("slash", *"low", "enter")
        assert await app.wait_until_shown(lambda: len(row_keys(app, "ov-senders")) == 1, WAIT)
        table = app.screen.query_one("#ov-senders", DataTable)
        assert str(table.get_row_at(0)[0]) == "low-limit"
        assert "[filter: low]" in str(table.border_title)
