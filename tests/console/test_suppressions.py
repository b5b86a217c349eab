"""The console's suppression screen (key x): the list, a filter, an address's history, and lifting only
after a confirm that states the consequence (a complaint's above all); hidden in read-only mode."""

from __future__ import annotations

import getpass
from collections.abc import Callable

from console.app import MailroomConsole
from console.widgets.dialogs import ConfirmScreen, RowScreen
from tests.console.helpers import WAIT, asked, noticed, open_screen, row_keys
from tests.ops.suppression_helpers import audit_rows, list_bounce, listed


def _seed(url: str) -> None:
    list_bounce(url, "angry@example.com", kind="complaint", reason="abuse report")
    list_bounce(url, "gone@example.org", reason="550 5.1.1 no such user")


async def test_the_list_filters_and_shows_an_addresss_history(
    db_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    _seed(db_url)
    app = make_console(db_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "x")
        assert app.current_mode == "suppressions"
        assert await app.wait_until_shown(lambda: len(row_keys(app, "suppressions")) == 2, WAIT)
        await pilot.press("slash", *"example.org", "enter")
        assert await app.wait_until_shown(
            lambda: row_keys(app, "suppressions") == ["gone@example.org hard"], WAIT
        )
        await pilot.press("enter")
        assert await app.wait_until_shown(lambda: isinstance(app.screen, RowScreen), WAIT)
        assert isinstance(app.screen, RowScreen)
        [event] = app.screen.row.values()
        assert "listed hard (smtp) 5.1.1" in event and "no such user" in event


async def test_lifting_a_complaint_asks_with_its_consequence_and_is_audited(
    db_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    _seed(db_url)
    app = make_console(db_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "x")
        assert await app.wait_until_shown(lambda: len(row_keys(app, "suppressions")) == 2, WAIT)
        keys = row_keys(app, "suppressions")
        down = ["down"] * keys.index("angry@example.com complaint")
        confirm: ConfirmScreen = await asked(app, pilot, *down, "l")
        assert "complained" in confirm.question and "spam" in confirm.question
        assert "sent to it again" in confirm.question
        await pilot.press("n")  # kept as is
        assert listed(db_url)["angry@example.com"] == "complaint"
        await asked(app, pilot, "l")
        await pilot.press("y")
        assert await app.wait_until_shown(noticed(app, "lifted complaint for angry@example.com"), WAIT)
        assert await app.wait_until_shown(
            lambda: row_keys(app, "suppressions") == ["gone@example.org hard"], WAIT
        )
    assert listed(db_url) == {"gone@example.org": "hard"}
    [(action, actor, _, detail)] = audit_rows(db_url, "suppression.")
    assert (action, actor, detail["forced"]) == ("suppression.remove", f"console:{getpass.getuser()}", True)


async def test_read_only_mode_cannot_lift(db_url: str, make_console: Callable[..., MailroomConsole]) -> None:
    _seed(db_url)
    app = make_console(db_url, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "x")
        assert await app.wait_until_shown(lambda: len(row_keys(app, "suppressions")) == 2, WAIT)
        await pilot.press("l")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
    assert len(listed(db_url)) == 2
