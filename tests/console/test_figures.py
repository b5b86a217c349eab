"""The overview's figures against SQL counts: exact under the cap, marked estimates with a bound above it."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from textual.widgets import DataTable, Static

from console.app import MailroomConsole
from console.figures import Count
from console.queries import ConsoleData
from tests.console.helpers import open_screen
from tests.console.seed import FROZEN_NOW

# Many pending email in one statement: 99% scheduled tomorrow, 1% due, 32 of them retrying. (The queries'
# speed at a million is measured by bench/console_queries.py, not here.)
BULK = """
INSERT INTO mailroom.email_queue (id, recipient_email, subject, text_body, scheduled_for, retry_count, created_at)
SELECT 100000 + g, 'bulk' || g || '@example.com', 'Bulk', 'b',
       CASE WHEN g %% 100 = 0 THEN %(now)s - interval '5 minutes' ELSE %(now)s + interval '1 day' END,
       CASE WHEN g <= 32 THEN 1 ELSE 0 END, %(now)s - interval '10 minutes'
FROM generate_series(1, %(rows)s) g
"""

SQL_COUNTS = """
SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'pending' AND scheduled_for <= %(now)s) AS due_now,
       count(*) FILTER (WHERE status = 'pending' AND scheduled_for > %(now)s) AS scheduled_later,
       count(*) FILTER (WHERE status = 'pending' AND retry_count > 0) AS retrying,
       count(*) FILTER (WHERE status = 'failed') AS failed
FROM mailroom.email_queue
"""


async def test_a_queue_twenty_times_the_cap_reads_exact_small_counts_and_bounded_estimates(
    seeded_url: str,
) -> None:
    with psycopg.connect(seeded_url) as conn:
        conn.execute(BULK, {"now": FROZEN_NOW, "rows": 100_000})
        conn.commit()
        conn.autocommit = True
        conn.execute("ANALYZE mailroom.email_queue")  # the estimates scale by the planner's row count
        truth = conn.execute(SQL_COUNTS, {"now": FROZEN_NOW}).fetchone()
    assert truth is not None
    pending, due_now, later, retrying, failed = (int(v) for v in truth)
    data = ConsoleData(seeded_url)
    # A cap of 5,000 (50,000 in use) puts 100,000 pending as far past it as 1,000,000 would be.
    data.exact_limit = 5_000
    try:
        overview = await data.overview(FROZEN_NOW)
    finally:
        await data.close()
    c = overview.counts
    # Under the cap: exact, however large the queue (a 1% sample of 32 retrying rows would read 0).
    assert c["retrying"] == Count(retrying) and retrying == 36  # the seed's 4 and these 32
    assert c["due_now"] == Count(due_now) and due_now == 1_000 + 10
    assert c["failed"] == Count(failed)
    # Over the cap: an estimate, marked, never below the bound it is known to pass.
    for key, true in (("pending", pending), ("scheduled_later", later)):
        assert not c[key].exact and c[key].at_least == data.exact_limit
        assert abs(c[key].value - true) < true * 0.1, (key, c[key], true)
        assert c[key].label().startswith("~") and c[key].label().endswith(" (est.)")


def test_count_labels_say_exact_estimated_or_at_least() -> None:
    assert Count(1234).label() == "1,234"
    assert Count(1_040_000, exact=False, at_least=50_000).label() == "~1.0M (est.)"
    assert Count(100, exact=False, at_least=50_000).label() == "≥50,000"


async def test_overview_labels_attempt_and_final_failure_rates_and_tries_count_attempts(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    app = make_console(seeded_url)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_screen(app, pilot, "6")
        await open_screen(app, pilot, "1")
        rates = str(app.screen.query_one("#rates", Static).render())
        with psycopg.connect(seeded_url) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE outcome NOT IN ('sent', 'suppressed')), count(*)"
                " FROM mailroom.send_logs WHERE attempted_at > %(now)s - interval '1 hour'"
                " AND attempted_at <= %(now)s",
                {"now": FROZEN_NOW},
            ).fetchone()
        assert row is not None
        assert f"attempts failed {row[0] / row[1]:.1%} of {row[1]:,}" in rates
        # Ended in the hour: 6001 sent, 1012..1007 failed (every 9 minutes).
        assert "email failed    85.7% of 7 finished" in rates
        await open_screen(app, pilot, "2")
        table = app.screen.query_one("#failures", DataTable)
        tries = {str(k.value): str(table.get_cell(k, "tries")) for k in table.rows}
        assert tries["1012"] == "6/6"  # failed after its first attempt and five retries
        assert tries["2001"] == "1/6"  # retrying after one failed attempt


async def test_queue_screen_estimates_past_the_cap_are_marked_and_near_the_sql_counts(
    seeded_url: str, make_console: Callable[..., MailroomConsole]
) -> None:
    with psycopg.connect(seeded_url) as conn:
        conn.execute(BULK, {"now": FROZEN_NOW, "rows": 60_000})
        conn.execute("ANALYZE mailroom.email_queue")
    data = ConsoleData(seeded_url)
    try:
        by_priority, _, estimated = await data.queue(FROZEN_NOW)
    finally:
        await data.close()
    assert estimated
    [zero] = [r for r in by_priority if r["priority"] == 0]
    assert abs(int(zero["n"]) - 60_000) < 6_000, zero
    app = make_console(seeded_url)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_screen(app, pilot, "7")
        table = app.screen.query_one("#by-priority", DataTable)
        assert "~ estimates from a 1% sample" in str(table.border_title)
        assert str(table.get_cell("0", table.ordered_columns[1].key)).startswith("~")
