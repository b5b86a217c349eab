"""The health banner: on every screen, from `mailroom health`'s own checks, kept live by notifications."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from console.app import MailroomConsole
from console.widgets.banner import Banner
from tests.console.helpers import WAIT, asked, open_screen


def banner_text(app: MailroomConsole) -> str:
    """What the active screen's banner says ('' while it is hidden)."""
    banner = app.screen.query_one(Banner)
    return "" if banner.has_class("hidden") else str(banner.render())


async def test_suspending_every_sender_with_email_due_raises_the_banner_within_a_second(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "7")
        assert await app.wait_until_shown(lambda: app.health_checks > 0, WAIT)
        assert banner_text(app) == ""
        with psycopg.connect(seeded_url) as conn:
            conn.execute(
                "UPDATE mailroom.sender_accounts SET status = 'suspended', status_reason = 'auth failed'"
            )
        # Shown by NOTIFY, not the 30 s fallback timer (the wait gives up well before it).
        assert await app.wait_until_shown(lambda: "no sender can send" in banner_text(app), WAIT)
        text = banner_text(app)
        assert "3 Senders, u resumes one" in text
        [finding] = app.findings
        assert finding.kind == "no_sender" and "primary suspended (auth failed)" in finding.text
        await pilot.press("3")  # the banner follows to every screen, and the key it names works
        assert await app.wait_until_shown(lambda: "no sender can send" in banner_text(app), WAIT)
        await asked(
            app, pilot, "u"
        )  # resumes the first sender (backup): mail flows, the other three are warnings
        await pilot.press("y")
        assert await app.wait_until_shown(
            lambda: (
                {f.kind for f in app.findings} == {"sender_suspended"} and "no sender" not in banner_text(app)
            ),
            WAIT,
        )
        assert not app.screen.query_one(Banner).has_class("-problem")


async def test_one_suspended_sender_is_a_warning_and_a_dead_worker_a_problem(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "2")
        with psycopg.connect(seeded_url) as conn:
            conn.execute("UPDATE mailroom.sender_accounts SET status = 'suspended' WHERE name = 'warming'")
        assert await app.wait_until_shown(lambda: "sender warming is suspended" in banner_text(app), WAIT)
        assert not app.screen.query_one(Banner).has_class("-problem")
        with psycopg.connect(seeded_url) as conn:
            conn.execute("UPDATE mailroom.workers SET seen_at = now() - interval '5 minutes'")
            conn.execute("UPDATE mailroom.email_queue SET priority = priority WHERE id = 3001")  # any change
        assert await app.wait_until_shown(lambda: "no worker has been alive" in banner_text(app), WAIT)
        assert app.screen.query_one(Banner).has_class("-problem")
        assert "start one: mailroom worker" in banner_text(app)


async def test_complaints_and_failed_attempts_over_threshold_show_with_their_keys(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "6")
        with psycopg.connect(seeded_url) as conn:
            conn.execute(
                "INSERT INTO mailroom.send_logs (email_id, sender_account_id, recipient_email, attempt, outcome,"
                " response, worker)"
                " SELECT g, (SELECT min(id) FROM mailroom.sender_accounts), 'x@example.com', 1,"
                " CASE WHEN g <= 100040 THEN 'transient' ELSE 'sent' END, 'r', 'w'"
                " FROM generate_series(100001, 100100) g"
            )
            conn.execute(
                "INSERT INTO mailroom.bounce_events (email_id, recipient, kind, source, raw_size, dedupe_key)"
                " SELECT g, 'x@example.com', 'complaint', 'arf', 1, 'angry' || g FROM generate_series(100041, 100050) g"
            )
        assert await app.wait_until_shown(
            lambda: {"attempt_failures", "complaint_rate"} <= {f.kind for f in app.findings}, WAIT
        )
        await pilot.pause()
        text = banner_text(app)
        assert "2 Failures shows why" in text and "3 Senders, s suspends one" in text
        await pilot.press("exclamation_mark")
        assert await app.wait_until_shown(lambda: type(app.screen).__name__ == "HealthScreen", WAIT)
