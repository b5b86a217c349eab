"""Every console screen as a picture, at 120x40 and 80x24, on fixed data and a frozen clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from textual.pilot import Pilot

from console.app import MailroomConsole
from tests.console.seed import FROZEN_NOW

SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]
WAIT = 10.0


def showing(key: str | None, *then: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """Before the screenshot: wait for live data, press `key` (a screen) and wait for its data, then `then`."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, MailroomConsole)
        assert await app.wait_until_shown(lambda: app.live_state == "live" and app.refreshes > 0, WAIT)
        if key is not None:
            before = app.refreshes
            await pilot.press(key)
            assert await app.wait_until_shown(lambda: app.refreshes > before, WAIT)
        if then:
            await pilot.press(*then)
        # Loads finish; a confirmation's worker waits for its answer, which the picture must show unanswered.
        loading = [w for w in app.workers if w.group != "confirm"]
        if loading:
            await app.workers.wait_for_complete(loading)
        await pilot.pause()

    return run_before


SCREENS = [
    pytest.param(None, (), id="overview"),
    pytest.param("2", (), id="failures"),
    pytest.param("3", (), id="senders"),
    pytest.param("4", (), id="accounts"),
    pytest.param("5", (), id="signatures"),
    pytest.param("6", (), id="schedule"),
    pytest.param("7", (), id="queue"),
]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("key", "then"), SCREENS)
def test_screen_snapshot(
    snap_compare: Any,
    seeded_url: str,
    make_console: Callable[..., MailroomConsole],
    key: str | None,
    then: tuple[str, ...],
    size: tuple[int, int],
) -> None:
    app = make_console(seeded_url)
    assert snap_compare(app, terminal_size=size, run_before=showing(key, *then))


@pytest.mark.parametrize(
    ("key", "then", "size"),
    [
        pytest.param("2", ("enter",), (120, 40), id="email-detail-120x40"),
        pytest.param("3", ("s",), (80, 24), id="confirm-suspend-80x24"),
        pytest.param("2", ("question_mark",), (120, 40), id="help-120x40"),
    ],
)
def test_pushed_screen_snapshot(
    snap_compare: Any,
    seeded_url: str,
    make_console: Callable[..., MailroomConsole],
    key: str,
    then: tuple[str, ...],
    size: tuple[int, int],
) -> None:
    app = make_console(seeded_url)
    assert snap_compare(app, terminal_size=size, run_before=showing(key, *then))


def test_read_only_failures_snapshot(
    snap_compare: Any, seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url, read_only=True)
    assert snap_compare(app, terminal_size=(120, 40), run_before=showing("2"))


# Fixed times and role: the picture must not depend on the clock or on the test server's user.
AUDIT_ROWS = """
INSERT INTO mailroom.audit_log (at, db_role, actor, action, target, affected, detail) VALUES
  (%(now)s - interval '2 hours', 'mailroom', 'alice', 'sender.add', 'transactional-1', 1,
   '{"host": "smtp.example.com", "port": 587}'),
  (%(now)s - interval '1 hour', 'mailroom', 'console:bob', 'queue.retry', 'every failed email', 1204,
   '{"all_failed": true}'),
  (%(now)s - interval '5 minutes', 'mailroom', 'console:bob', 'sender.suspend', 'transactional-1', 1,
   '{"from": "active", "to": "suspended", "reason": "credentials revoked"}')
"""


@pytest.mark.parametrize("size", SIZES)
def test_audit_screen_snapshot(
    snap_compare: Any, seeded_url: str, make_console: Callable[..., MailroomConsole], size: tuple[int, int]
) -> None:
    with psycopg.connect(seeded_url) as conn:
        conn.execute(AUDIT_ROWS, {"now": FROZEN_NOW})
    app = make_console(seeded_url)
    assert snap_compare(app, terminal_size=size, run_before=showing("0"))
