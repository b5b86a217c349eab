"""A first day without friction: what a new user meets, tried as they would, through the command line."""

from __future__ import annotations

import psycopg
import pytest

from tests.cli import run
from tests.worker.helpers import add_sender, enqueue_many, statuses
from worker.devtools.sink import RunningSink


def test_drain_with_email_due_and_no_usable_sender_says_why_and_exits_1(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink, capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url, smtp_sink.port)
    add_sender(db_url, smtp_sink.port, name="backup")
    enqueue_many(db_url, 2)
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "UPDATE mailroom.sender_accounts SET status = 'suspended', status_reason = '535 5.7.8 bad login'"
            " WHERE name = 'primary'"
        )
        conn.execute("UPDATE mailroom.sender_accounts SET status = 'paused' WHERE name = 'backup'")

    code, _, err = run(capsys, "worker", "--drain", "--no-producers")

    assert code == 1
    assert "worker: sent 0 email(s)" in err
    assert (
        "2 emails are due and no sender can send them: backup paused; primary suspended (535 5.7.8 bad login)"
        in err
    )
    assert statuses(db_url) == {"pending": 2}


def test_drain_that_sends_everything_exits_0(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink, capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 2)

    code, _, err = run(capsys, "worker", "--drain", "--no-producers")

    assert (code, statuses(db_url)) == (0, {"sent": 2})
    assert "no sender can send" not in err
