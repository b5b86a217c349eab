"""Live updates: changes made elsewhere reach the screen, bursts coalesce, a dropped LISTEN reconnects,
and a failover leaves the console on the new primary."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import psycopg
import pytest
from rich.console import Console
from textual.widgets import Static

from console.app import MailroomConsole
from console.live import ALL_TABLES, Coalescer
from tests.console.helpers import WAIT, cell, open_screen, row_keys
from tests.console.seed import FROZEN_NOW
from tests.fixtures_failover import Pair
from tests.worker.helpers import add_sender


async def test_a_change_committed_by_another_connection_appears_by_notify(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        assert cell(app, "senders", "warming", 1) == "warming up"
        with psycopg.connect(seeded_url) as other:
            other.execute("UPDATE mailroom.sender_accounts SET status = 'suspended' WHERE name = 'warming'")
        # WAIT is well under the 30 s fallback timer: only the NOTIFY can bring it this soon
        assert await app.wait_until_shown(lambda: cell(app, "senders", "warming", 1) == "suspended", WAIT)


async def test_a_new_failure_reaches_the_failures_screen_without_a_keypress(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        with psycopg.connect(seeded_url) as other:
            other.execute(
                "UPDATE mailroom.email_queue SET status = 'failed', last_error = '550 5.1.1 no such user' "
                "WHERE id = 4001"
            )
        assert await app.wait_until_shown(lambda: "4001" in row_keys(app, "failures"), WAIT)


def tracking_counts(app: MailroomConsole) -> dict[str, tuple[int, int]]:
    """The Overview's tracking panel as drawn: kind -> (last hour, last 24 hours)."""
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(app.screen.query_one("#tracking", Static).content)
    counts = {}
    for line in console.export_text().splitlines():
        words = line.split()
        if words and words[0] in ("opens", "clicks", "unsubscribes"):
            counts[words[0]] = (int(words[-2].replace(",", "")), int(words[-1].replace(",", "")))
    return counts


async def test_opens_clicks_and_unsubscribes_from_another_connection_reach_the_overview_by_notify(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)):
        assert await app.wait_until_shown(lambda: app.live_state == "live" and app.refreshes > 0, WAIT)
        before = tracking_counts(app)
        assert before == {"opens": (8, 382), "clicks": (1, 66), "unsubscribes": (0, 6)}
        # One commit at a time, each waited for on its own: every table must wake the console by itself.
        steps = [
            (
                "INSERT INTO mailroom.open_events (occurred_at, email_id, user_agent)"
                " SELECT %(now)s - make_interval(mins => g), 3001, 'Mozilla/5.0' FROM generate_series(1, 5) g",
                {"opens": (13, 387), "clicks": (1, 66), "unsubscribes": (0, 6)},
            ),
            (
                "INSERT INTO mailroom.click_events (occurred_at, email_id, link_token, url)"
                " SELECT %(now)s - interval '3 minutes', 3001, gen_random_uuid(), 'https://shop.example/'"
                " FROM generate_series(1, 2)",
                {"opens": (13, 387), "clicks": (3, 68), "unsubscribes": (0, 6)},
            ),
            (  # the second one is older than a day: not counted
                "INSERT INTO mailroom.unsubscribe_list (email, source, unsubscribed_at)"
                " VALUES ('new@example.com', 'one_click', %(now)s - interval '10 minutes'),"
                "        ('old@example.com', 'link', %(now)s - interval '25 hours')",
                {"opens": (13, 387), "clicks": (3, 68), "unsubscribes": (1, 7)},
            ),
        ]
        with psycopg.connect(seeded_url, autocommit=True) as other:
            for statement, expected in steps:
                other.execute(statement, {"now": FROZEN_NOW})
                assert await app.wait_until_shown(lambda e=expected: tracking_counts(app) == e, WAIT), (
                    expected
                )


async def test_after_the_listen_connection_drops_it_reconnects_and_refreshes_everything(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        pid = app.feed.backend_pid
        assert pid is not None and app.feed.connects == 1
        with psycopg.connect(seeded_url, autocommit=True) as other:
            # Changed while the console is away: only the full refresh after reconnecting can show it.
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
            other.execute("UPDATE mailroom.sender_accounts SET status = 'paused' WHERE name = 'primary'")
        assert await app.wait_until_shown(
            lambda: app.feed.connects == 2 and cell(app, "senders", "primary", 1) == "paused", WAIT
        )
        assert app.states[-2:] == ["reconnecting", "live"]
        assert app.feed.backend_pid not in (None, pid)
        assert "● live" in str(app.screen.query_one("#header").render())


async def test_a_burst_of_notifications_costs_only_a_few_refreshes(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        received, flushes = app.feed.received, app.coalescer.flushes
        with psycopg.connect(seeded_url, autocommit=True) as other:
            started = time.monotonic()
            for _ in range(4):
                other.execute(
                    "SELECT pg_notify('mailroom_changes', json_build_object('table', 'sender_accounts', 'n', g)::text)"
                    " FROM generate_series(1, 500) g"
                )
        assert await app.wait_until_shown(lambda: app.feed.received >= received + 2000, WAIT)
        elapsed = time.monotonic() - started
        assert await app.wait_until_shown(lambda: not app.coalescer.pending, WAIT)
        # At most one refresh per interval of the burst, plus the one that closes it.
        assert app.coalescer.flushes - flushes <= elapsed / app.coalescer.interval + 2


def test_coalescer_flushes_once_per_interval_with_every_table_it_saw() -> None:
    now = [100.0]
    scheduled: list[tuple[float, Callable[[], None]]] = []
    flushed: list[set[str]] = []
    coalescer = Coalescer(
        flushed.append, lambda delay, fn: scheduled.append((delay, fn)), interval=0.25, clock=lambda: now[0]
    )
    for i in range(1000):
        coalescer.add({"email_queue" if i % 2 else "send_logs"})
    assert [delay for delay, _ in scheduled] == [0.0]
    scheduled.pop()[1]()
    assert flushed == [{"email_queue", "send_logs"}]
    now[0] += 0.05
    coalescer.add({ALL_TABLES})
    coalescer.add({"accounts"})
    assert len(scheduled) == 1 and abs(scheduled[0][0] - 0.20) < 1e-9
    now[0] += 0.20
    scheduled.pop()[1]()
    assert flushed[1] == {ALL_TABLES, "accounts"}


@pytest.mark.e2e  # a PostgreSQL 15 pair
async def test_after_a_failover_the_console_reads_and_listens_on_the_new_primary_and_says_so(
    pg15_pair: Pair, make_console: Callable[..., MailroomConsole]
) -> None:
    url = pg15_pair.url()  # both nodes, target_session_attrs=read-write
    add_sender(url, 2525, name="primary")
    app = make_console(url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "3")
        # The primary turns read-only and stays up; the standby takes over.
        pg15_pair.primary.demote()
        pg15_pair.standby.promote()
        with psycopg.connect(url, autocommit=True) as other:  # written on the new primary alone
            other.execute("UPDATE mailroom.sender_accounts SET status = 'paused' WHERE name = 'primary'")
        # Well under the 30 s fallback timer, which would only read the old primary again anyway.
        assert await app.wait_until_shown(lambda: cell(app, "senders", "primary", 1) == "paused", 3 * WAIT)
        assert app.states[-2:] == ["reconnecting", "live"]
        said = [text for _, text in app.notices]
        assert any(t.startswith("lost the database (") and "takes no writes" in t for t in said), said
        assert "reconnected to the database; everything shown is read again" in said
