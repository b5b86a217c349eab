"""Every console screen as a picture, at 120x40 and 80x24, on fixed data and a frozen clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from console.app import MailroomConsole
from console.widgets.dialogs import ConfirmScreen
from tests.console.helpers import WAIT, shown_after
from tests.console.seed import FROZEN_NOW

SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]


def showing(key: str | None, *then: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """Before the screenshot: wait for live data, press `key` (a screen) and wait for its data, then `then`."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, MailroomConsole)
        assert await app.wait_until_shown(lambda: app.live_state == "live" and app.refreshes > 0, WAIT)
        # The banner's health check runs beside the first load: the picture waits for both.
        assert await app.wait_until_shown(lambda: app.health_checks > 0, WAIT)
        if key is None:
            assert await app.wait_until_shown(
                lambda: app.screen.query_one("#ov-senders", DataTable).row_count == 4, WAIT
            )
        if key is not None:
            await shown_after(app, pilot, key)
        if then:
            await pilot.press(*then)
            # A confirmation counts in the database before it opens: wait for it to be up.
            if any(w.group == "confirm" for w in app.workers):
                assert await app.wait_until_shown(lambda: isinstance(app.screen, ConfirmScreen), WAIT)
        await settled(pilot)
        await pilot.pause()

    return run_before


async def settled(pilot: Pilot[Any]) -> None:
    """Until nothing more is coming: no refresh scheduled (the LISTEN feed asks for a full one when it
    connects, a moment after the first load), none waiting in the screen's queue and no load running.
    A confirmation's worker waits for its answer, which the picture must show unanswered. Before, a
    picture taken while the feed's refresh redrew a table showed its header without the rows' widths."""
    app = pilot.app
    assert isinstance(app, MailroomConsole)
    while True:
        # The flush posts a Reload the screen may not take (its tables did not change), so nothing
        # would wake a wait for it: looked at every few frames, for at most WAIT.
        give_up = asyncio.get_running_loop().time() + WAIT
        while app.coalescer.pending:
            assert asyncio.get_running_loop().time() < give_up, "a refresh stayed scheduled"
            await pilot.pause(0.05)
        await pilot.pause()  # the screen takes what waits in its queue (a Reload starts its load)
        loading = [w for w in app.workers if w.group != "confirm" and not w.is_finished]
        if not loading and not app.coalescer.pending:
            return
        await app.workers.wait_for_complete(loading)


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
        pytest.param("2", ("enter",), (80, 24), id="email-detail-80x24"),
        pytest.param("3", ("s",), (80, 24), id="confirm-suspend-80x24"),
        pytest.param("2", ("R",), (80, 24), id="confirm-retry-all-80x24"),
        pytest.param("2", ("question_mark",), (120, 40), id="help-120x40"),
        pytest.param("2", ("question_mark",), (80, 24), id="help-80x24"),
        pytest.param("3", ("enter",), (80, 24), id="sender-row-80x24"),
        pytest.param("3", ("o", "O"), (80, 24), id="senders-sorted-80x24"),
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


# Each state of the banner, set up in the database before the console starts (the heartbeat and the
# attempt and bounce windows are on the database's clock; the texts hold no time of day).
BANNERS = {
    "no-sender": ["UPDATE mailroom.sender_accounts SET status = 'suspended', status_reason = 'auth failed'"],
    "one-suspended": [
        "UPDATE mailroom.sender_accounts SET status = 'suspended', status_reason = 'spam complaints'"
        " WHERE name = 'warming'"
    ],
    "no-worker-complaints": [
        "UPDATE mailroom.workers SET seen_at = now() - interval '5 minutes'",
        "INSERT INTO mailroom.send_logs (email_id, sender_account_id, recipient_email, attempt, outcome,"
        " response, worker)"
        " SELECT g, (SELECT id FROM mailroom.sender_accounts WHERE name = 'primary'), 'x@example.com', 1,"
        " CASE WHEN g <= 100040 THEN 'transient' ELSE 'sent' END, 'r', 'w' FROM generate_series(100001, 100100) g",
        "INSERT INTO mailroom.bounce_events (email_id, recipient, kind, source, raw_size, dedupe_key)"
        " SELECT g, 'x@example.com', 'complaint', 'arf', 1, 'angry' || g FROM generate_series(100041, 100050) g",
    ],
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("state", list(BANNERS))
def test_banner_snapshot(
    snap_compare: Any,
    seeded_url: str,
    make_console: Callable[..., MailroomConsole],
    state: str,
    size: tuple[int, int],
) -> None:
    with psycopg.connect(seeded_url) as conn:
        for statement in BANNERS[state]:
            conn.execute(statement)
    app = make_console(seeded_url)

    async def run_before(pilot: Pilot[Any]) -> None:
        assert await app.wait_until_shown(lambda: app.health_checks > 0 and bool(app.findings), WAIT)
        await showing(None)(pilot)
        # The overview's tables are filled (the health check may finish before the first load).
        assert await app.wait_until_shown(
            lambda: app.screen.query_one("#ov-senders", DataTable).row_count == 4, WAIT
        )
        await settled(pilot)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
