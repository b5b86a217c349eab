"""The console through a PostgreSQL restart: it says so, reconnects by itself and shows what changed."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import psycopg
import pytest

from console.app import MailroomConsole
from tests.console.helpers import WAIT, cell, open_screen
from tests.fixtures_db import restart_embedded_server


@pytest.mark.skipif(
    os.environ.get("MAILROOM_TEST_DATABASE_URL") is not None,
    reason="restarts the embedded server; an external one is not ours to restart",
)
async def test_after_a_server_restart_the_console_reconnects_and_shows_changes(
    seeded_url: str, pg_admin_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        assert app.feed.connects == 1
        await asyncio.to_thread(restart_embedded_server, pg_admin_url)
        # Every connection the console held is gone; it must notice, reconnect and refresh by itself.
        with psycopg.connect(seeded_url, autocommit=True) as other:
            other.execute("UPDATE mailroom.sender_accounts SET status = 'paused' WHERE name = 'primary'")
        assert await app.wait_until_shown(
            lambda: app.feed.connects >= 2 and cell(app, "senders", "primary", 1) == "paused", 3 * WAIT
        )
        assert "reconnecting" in app.states
        assert app.states[-1] == "live"
        assert "● live" in str(app.screen.query_one("#header").render())
