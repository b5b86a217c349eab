"""Warm-up stages advance in reserve_quota: once a UTC day, after a full day with at most 2% bounces."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from worker.cli.main import main
from worker.core import db
from worker.engine.queue_sql import RESERVE
from worker.ops.senders import set_sender_status

Conn = psycopg.Connection[dict[str, Any]]

SENDER = """
INSERT INTO mailroom.sender_accounts
    (name, from_email, smtp_host, smtp_port, daily_limit, warmup_stage, warmup_limit, status)
VALUES (%(name)s, 'noreply@example.org', '127.0.0.1', 25, %(daily)s, %(stage)s, %(limit)s, %(status)s)
RETURNING id
"""

# The test's clock: usage written for a day `ago` days before today (UTC), as delivery would have.
USED = """
INSERT INTO mailroom.sender_usage (sender_account_id, day, sent, bounces)
VALUES (%s, (now() AT TIME ZONE 'UTC')::date - %s, %s, %s)
"""

ACCOUNT = """
SELECT warmup_stage, warmup_limit, status, status_reason, warmup_checked_on, version
FROM mailroom.sender_accounts WHERE id = %s
"""

# Moving every date of an account one day back is the same as the clock moving one day on.
# Two steps: the primary key (sender, day) is checked row by row, so a shift by one would collide.
NEXT_DAY = (
    "UPDATE mailroom.sender_usage SET day = day - 1000 WHERE sender_account_id = %(s)s",
    "UPDATE mailroom.sender_usage SET day = day + 999 WHERE sender_account_id = %(s)s",
    "UPDATE mailroom.sender_accounts SET warmup_checked_on = warmup_checked_on - 1,"
    " limit_reached_on = limit_reached_on - 1 WHERE id = %(s)s",
)

RESERVE_QUOTA_DEF = "SELECT pg_get_functiondef('mailroom.reserve_quota(bigint, integer)'::regprocedure) AS d"
HAS_CHECKED_ON = (
    "SELECT count(*) AS n FROM information_schema.columns WHERE table_schema = 'mailroom'"
    " AND table_name = 'sender_accounts' AND column_name = 'warmup_checked_on'"
)

LOCK_WAITERS = "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"


def _sender(
    conn: Conn,
    *,
    stage: int = 1,
    limit: int | None = 10,
    daily: int = 1000,
    status: str = "warming_up",
    name: str = "w",
) -> int:
    row = conn.execute(
        SENDER, {"name": name, "daily": daily, "stage": stage, "limit": limit, "status": status}
    ).fetchone()
    assert row is not None
    return int(row["id"])


def _used(conn: Conn, sender: int, *, ago: int = 1, sent: int, bounces: int = 0) -> None:
    conn.execute(USED, (sender, ago, sent, bounces))


def _reserve(conn: Conn, sender: int, wanted: int) -> int:
    row = conn.execute(RESERVE, (sender, wanted)).fetchone()
    assert row is not None
    return int(row["granted"])


def _account(conn: Conn, sender: int) -> dict[str, Any]:
    row = conn.execute(ACCOUNT, (sender,)).fetchone()
    assert row is not None
    return row


def _next_day(conn: Conn, sender: int) -> None:
    for statement in NEXT_DAY:
        conn.execute(statement, {"s": sender})


def _today(conn: Conn) -> date:
    row = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date AS d").fetchone()
    assert row is not None
    today: date = row["d"]
    return today


def test_a_full_clean_day_advances_the_stage_and_doubles_the_limit(conn: Conn) -> None:
    sender = _sender(conn, stage=1, limit=10)
    _used(conn, sender, sent=10)
    assert _reserve(conn, sender, 1) == 1
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["warmup_limit"], account["status"]) == (2, 20, "warming_up")
    assert account["status_reason"] is None
    assert account["warmup_checked_on"] == _today(conn)


def test_the_advanced_limit_caps_the_next_reservations(conn: Conn) -> None:
    sender = _sender(conn, stage=1, limit=10)
    _used(conn, sender, sent=10)
    assert _reserve(conn, sender, 25) == 20
    assert _reserve(conn, sender, 1) == 0
    account = _account(conn, sender)
    assert (account["status"], account["status_reason"]) == (
        "paused_limit_reached",
        "daily limit of 20 reached",
    )


def test_an_account_advances_once_a_day_however_often_it_reserves(conn: Conn) -> None:
    # Capped by its daily limit, yesterday stays a full day after advancing: only the record of
    # today's check keeps the next reservations from advancing again.
    sender = _sender(conn, stage=1, limit=10, daily=10)
    _used(conn, sender, sent=10)
    assert [_reserve(conn, sender, 1) for _ in range(5)] == [1] * 5
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["warmup_limit"]) == (2, 20)


def test_concurrent_first_reservations_advance_the_account_once(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as setup:
        # Capped by its daily limit, so each waiting reservation would find yesterday full again.
        sender = _sender(setup, stage=1, limit=10, daily=10)
        _used(setup, sender, sent=10)

    def reserve_one() -> int:
        with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as worker:
            return _reserve(worker, sender, 1)

    # The first worker holds the sender row lock (uncommitted) while four more queue up behind it.
    # The pool shuts down last: should an assertion fail, `first` rolls back and frees the waiting threads.
    with (
        ThreadPoolExecutor(max_workers=4) as pool,
        psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as watch,
        psycopg.connect(db_url, row_factory=dict_row) as first,
    ):
        assert _reserve(first, sender, 1) == 1
        others = [pool.submit(reserve_one) for _ in range(4)]
        deadline = time.monotonic() + 30
        while (row := watch.execute(LOCK_WAITERS).fetchone()) is not None and row["n"] < 4:
            assert time.monotonic() < deadline, "the other reservations never waited for the row lock"
        first.commit()
        assert [f.result(timeout=30) for f in others] == [1] * 4
        account = _account(watch, sender)
        assert (account["warmup_stage"], account["warmup_limit"]) == (2, 20)
        row = watch.execute(
            "SELECT sent FROM mailroom.sender_usage WHERE sender_account_id = %s AND day = %s",
            (sender, _today(watch)),
        ).fetchone()
        assert row == {"sent": 5}


def test_a_day_under_the_cap_holds_the_stage_silently(conn: Conn) -> None:
    sender = _sender(conn, stage=2, limit=20)
    # The most recent earlier day decides, not an older full one.
    _used(conn, sender, ago=2, sent=20)
    _used(conn, sender, ago=1, sent=19)
    assert _reserve(conn, sender, 25) == 20
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["warmup_limit"]) == (2, 20)
    assert account["warmup_checked_on"] == _today(conn)
    assert account["status_reason"] == "daily limit of 20 reached"


def test_todays_own_usage_is_not_the_day_that_decides(conn: Conn) -> None:
    sender = _sender(conn, stage=1, limit=10)
    _used(conn, sender, ago=1, sent=10)
    # Bounces counted today before the first reservation make a row for today; it is not a past day.
    _used(conn, sender, ago=0, sent=0, bounces=5)
    assert _reserve(conn, sender, 1) == 1
    assert _account(conn, sender)["warmup_stage"] == 2


def test_a_bouncy_day_holds_the_stage_and_says_why(conn: Conn) -> None:
    sender = _sender(conn, stage=2, limit=100, daily=1000)
    _used(conn, sender, sent=100, bounces=3)
    assert _reserve(conn, sender, 1) == 1
    account = _account(conn, sender)
    yesterday = (_today(conn) - timedelta(days=1)).isoformat()
    assert (account["warmup_stage"], account["warmup_limit"], account["status"]) == (2, 100, "warming_up")
    assert account["status_reason"] == f"warm-up held at stage 2: 3.0% bounces on {yesterday}"

    # Today turns out clean and full: tomorrow it advances and the reason goes.
    assert _reserve(conn, sender, 99) == 99
    _next_day(conn, sender)
    assert _reserve(conn, sender, 1) == 1
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["warmup_limit"], account["status"]) == (3, 200, "warming_up")
    assert account["status_reason"] is None


@pytest.mark.parametrize(("bounces", "stage"), [(2, 3), (3, 2)])
def test_bounces_up_to_two_percent_of_the_day_still_advance(conn: Conn, bounces: int, stage: int) -> None:
    sender = _sender(conn, stage=2, limit=100)
    _used(conn, sender, sent=100, bounces=bounces)
    _reserve(conn, sender, 1)
    assert _account(conn, sender)["warmup_stage"] == stage


def test_a_full_day_at_stage_five_finishes_the_warm_up(conn: Conn) -> None:
    sender = _sender(conn, stage=5, limit=160, daily=1000)
    _used(conn, sender, sent=160)
    assert _reserve(conn, sender, 5000) == 1000
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["status"]) == (0, "paused_limit_reached")
    assert account["status_reason"] == "daily limit of 1000 reached"


def test_finishing_the_warm_up_makes_the_account_active(conn: Conn) -> None:
    sender = _sender(conn, stage=5, limit=160, daily=1000)
    _used(conn, sender, sent=160)
    assert _reserve(conn, sender, 1) == 1
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["status"], account["status_reason"]) == (0, "active", None)


def test_five_full_days_take_an_account_through_warm_up(conn: Conn) -> None:
    sender = _sender(conn, stage=1, limit=10, daily=1000)
    for cap in (10, 20, 40, 80, 160):
        assert _reserve(conn, sender, 10_000) == cap
        assert _account(conn, sender)["status"] == "paused_limit_reached"
        _next_day(conn, sender)
    assert _reserve(conn, sender, 10_000) == 1000
    assert _account(conn, sender)["warmup_stage"] == 0


@pytest.mark.parametrize("status", ["paused", "suspended"])
def test_a_paused_or_suspended_account_is_not_advanced(conn: Conn, status: str) -> None:
    sender = _sender(conn, stage=1, limit=10, status=status)
    _used(conn, sender, sent=10)
    assert _reserve(conn, sender, 1) == 0
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["warmup_limit"], account["status"]) == (1, 10, status)
    assert account["warmup_checked_on"] is None

    # Resumed, its first reservation weighs its last sending day.
    assert set_sender_status(conn, "w", "active") == "warming_up"
    assert _reserve(conn, sender, 25) == 20
    assert _account(conn, sender)["warmup_stage"] == 2


def test_an_account_paused_at_its_limit_yesterday_is_revived_and_advanced(conn: Conn) -> None:
    sender = _sender(conn, stage=1, limit=10)
    _used(conn, sender, sent=10)
    conn.execute(
        "UPDATE mailroom.sender_accounts SET status = 'paused_limit_reached', status_reason = 'daily limit of 10"
        " reached', limit_reached_on = (now() AT TIME ZONE 'UTC')::date - 1 WHERE id = %s",
        (sender,),
    )
    assert _reserve(conn, sender, 1) == 1
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["warmup_limit"], account["status"]) == (2, 20, "warming_up")
    assert account["status_reason"] is None


def test_a_daily_limit_below_the_warmup_limit_is_the_cap_to_fill(conn: Conn) -> None:
    sender = _sender(conn, stage=3, limit=40, daily=30)
    _used(conn, sender, sent=30)
    assert _reserve(conn, sender, 100) == 30
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["warmup_limit"]) == (4, 80)


def test_an_account_not_warming_up_is_left_alone(conn: Conn) -> None:
    sender = _sender(conn, stage=0, limit=None, daily=10, status="active")
    _used(conn, sender, sent=10)
    assert _reserve(conn, sender, 1) == 1
    account = _account(conn, sender)
    assert (account["warmup_stage"], account["warmup_checked_on"], account["version"]) == (0, None, 1)


def test_senders_list_shows_the_warmup_stage_and_limit(
    cli_env: dict[str, str], conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    _sender(conn, stage=2, limit=20, name="warming")
    _sender(conn, stage=0, limit=None, status="active", name="warm")
    conn.commit()
    assert main(["senders", "list"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert "WARM-UP" in header
    rows = {line.split()[0]: line for line in lines}
    assert "stage 2/5 20/day" in rows["warming"]
    assert rows["warm"].split()[3] == "-"


def test_downgrade_restores_the_previous_reserve_quota(empty_db_url: str) -> None:
    db.upgrade(empty_db_url, "0003")
    with psycopg.connect(empty_db_url, row_factory=dict_row) as conn:
        before = conn.execute(RESERVE_QUOTA_DEF).fetchone()
    db.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url, row_factory=dict_row) as conn:
        assert conn.execute(RESERVE_QUOTA_DEF).fetchone() != before
        assert conn.execute(HAS_CHECKED_ON).fetchone() == {"n": 1}
    db.downgrade(empty_db_url, "0003")
    with psycopg.connect(empty_db_url, row_factory=dict_row) as conn:
        assert conn.execute(RESERVE_QUOTA_DEF).fetchone() == before
        assert conn.execute(HAS_CHECKED_ON).fetchone() == {"n": 0}
