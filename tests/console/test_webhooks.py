"""The console's webhook screen (key w): each endpoint's state, kept live as the worker records its
POSTs, paused and resumed from the keyboard (audited); hidden actions in read-only mode."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from console.app import MailroomConsole
from tests.console.helpers import WAIT, noticed, open_screen, row_keys
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.hooks.endpoints import add


def _endpoint(db_url: str, settings: Settings, url: str) -> int:
    assert settings.secret_key is not None
    with psycopg.connect(db_url) as conn:
        return add(conn, SecretBox(settings.secret_key), url, ["email.sent"], role=None, allow_private=False,
                   actor="tester").id  # fmt: skip


def _status(db_url: str, endpoint: int) -> str:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status FROM mailroom.webhook_endpoints WHERE id = %s", (endpoint,)
        ).fetchone()
    assert row is not None
    return str(row[0])


async def test_the_screen_shows_endpoints_live_and_pauses_and_resumes_them(
    db_url: str, settings: Settings, make_console: Callable[..., MailroomConsole]
) -> None:
    first = _endpoint(db_url, settings, "https://hooks.example.com/a")
    app = make_console(db_url)
    async with app.run_test(size=(140, 40)) as pilot:
        await open_screen(app, pilot, "w")
        assert app.current_mode == "webhooks"
        assert await app.wait_until_shown(lambda: row_keys(app, "webhooks") == [str(first)], WAIT)
        second = _endpoint(db_url, settings, "https://hooks.example.com/b")  # the NOTIFY brings it in
        assert await app.wait_until_shown(
            lambda: row_keys(app, "webhooks") == [str(first), str(second)], WAIT
        )
        with psycopg.connect(db_url) as conn:  # as the dispatcher records failures
            conn.execute(
                "UPDATE mailroom.webhook_endpoints SET failures = 7, failing_since = now(), last_error = 'HTTP 503'"
                " WHERE id = %s", (second,),
            )  # fmt: skip
        table = app.screen.query_one("#webhooks")
        assert await app.wait_until_shown(lambda: "HTTP 503" in str(table.get_row(str(second))[-1]), WAIT)
        await pilot.press("p")
        assert await app.wait_until_shown(noticed(app, f"webhook endpoint {first} paused"), WAIT)
        assert _status(db_url, first) == "paused"
        await pilot.press("u")
        assert await app.wait_until_shown(noticed(app, f"webhook endpoint {first} resumed"), WAIT)
        assert _status(db_url, first) == "active"
    with psycopg.connect(db_url) as conn:
        actions = conn.execute(
            "SELECT action, actor FROM mailroom.audit_log WHERE action LIKE 'webhooks.%%' ORDER BY id"
        ).fetchall()
    assert [a for a, _ in actions] == ["webhooks.add", "webhooks.add", "webhooks.pause", "webhooks.resume"]
    assert actions[-1][1].startswith("console:")
