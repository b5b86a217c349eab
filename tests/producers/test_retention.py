"""Retention: sent email archived per day then deleted, inbox purge, partitions ahead and past retention (other final states: test_retention_states)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.producers.helpers import NOW, archived_ids, sent_email
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.ops.archive_files import archive_directory, archive_path, read_archive
from worker.ops.retention import run_maintenance

STEPS = [
    "archive_sent",
    "archive_bounced",
    "archive_failed",
    "archive_expired",
    "archive_cancelled",
    "archive_suppressed",
    "purge_inbox",
    "purge_quarantine",
    "purge_dmarc_reports",
    "purge_oauth_sessions",
    "purge_webhook_events",
    "link_audit",
    "prune_audit",
    "create_partitions",
    "drop_partitions",
    "expire_archives",
]


def queue_ids(conn: psycopg.Connection[Any]) -> set[int]:
    conn.commit()
    return {int(r["id"]) for r in conn.execute("SELECT id FROM mailroom.email_queue").fetchall()}


@pytest.fixture
def old_mail(conn: psycopg.Connection[Any], settings: Settings) -> dict[str, Any]:
    """Two old sent emails on each of three days, one recent sent email, one old pending email."""
    days = [(NOW - timedelta(days=d)).date() for d in (120, 110, 100)]
    old: dict[date, list[int]] = {}
    for day in days:
        base = datetime(day.year, day.month, day.day, tzinfo=UTC)
        old[day] = [sent_email(conn, settings, base + timedelta(hours=h)) for h in (1, 22)]
    recent = sent_email(conn, settings, NOW - timedelta(days=10))
    pending = enqueue(conn, EmailRequest(to="p@example.com", subject="Waiting", text="x"), settings=settings)
    first = old[days[0]][0]
    conn.execute(
        "INSERT INTO mailroom.tracked_links (email_id, position, url) VALUES (%s, 0, 'https://example.com/a')",
        (first,),
    )
    conn.commit()
    return {"days": days, "old": old, "recent": recent, "pending": pending}


def maintain(db_url: str, settings: Settings, now: datetime = NOW, **kwargs: Any) -> Any:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return run_maintenance(conn, settings, now=now, **kwargs)


def test_old_sent_email_is_archived_one_file_per_day_then_deleted(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, old_mail: dict[str, Any]
) -> None:
    report = maintain(db_url, settings)
    directory = archive_directory(settings)
    assert directory == settings.home / "archive"
    files = sorted(p.name for p in directory.iterdir())
    names = [f"emails-{d.isoformat()}.jsonl.gz" for d in old_mail["days"]]
    assert files == sorted(names + [f"{n}.sha256" for n in names])
    for day in old_mail["days"]:
        path = archive_path(directory, day)
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle]
        assert [r["id"] for r in records] == old_mail["old"][day]
        assert all(r["status"] == "sent" and r["recipient_email"] == "a@example.com" for r in records)
        assert oct(path.stat().st_mode & 0o777) == "0o600"
    first = old_mail["old"][old_mail["days"][0]][0]
    [record] = [
        json.loads(line)
        for _, line in read_archive(archive_path(directory, old_mail["days"][0]))
        if _ == first
    ]
    assert record["tracked_links"] == [
        {"position": 0, "url": "https://example.com/a", "token": record["tracked_links"][0]["token"]}
    ]
    assert queue_ids(conn) == {old_mail["recent"], old_mail["pending"]}
    steps = {s.name: s.rows for s in report.steps}
    assert steps["archive_sent"] == 6 and not report.errors


def test_dry_run_counts_and_changes_nothing(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, old_mail: dict[str, Any]
) -> None:
    before = queue_ids(conn)
    report = maintain(db_url, settings, dry_run=True)
    assert {s.name: s.rows for s in report.steps}["archive_sent"] == 6
    assert not archive_directory(settings).exists()
    assert queue_ids(conn) == before


_KILLER = """
import os, signal, sys
from datetime import datetime
import psycopg
from worker.core.config import Settings
from worker.ops.retention import run_maintenance

stage, day, now = sys.argv[1], sys.argv[2], datetime.fromisoformat(sys.argv[3])

def checkpoint(at, on):
    if at == stage and on.isoformat() == day:
        os.kill(os.getpid(), signal.SIGKILL)

with psycopg.connect(os.environ["MAILROOM_DATABASE_URL"], autocommit=True) as conn:
    run_maintenance(conn, Settings.from_env(), now=now, checkpoint=checkpoint)
"""


@pytest.mark.e2e
@pytest.mark.parametrize("stage", ["written", "archived", "deleted"])
def test_run_killed_midway_loses_nothing_and_the_next_run_completes_it(
    db_url: str,
    conn: psycopg.Connection[Any],
    settings: Settings,
    cli_env: dict[str, str],
    old_mail: dict[str, Any],
    stage: str,
) -> None:
    days = old_mail["days"]
    all_old = {i for ids in old_mail["old"].values() for i in ids}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLER, stage, days[1].isoformat(), NOW.isoformat()],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    directory = archive_directory(settings)
    # The first day is done; the second stopped at `stage`; nothing was lost on the way.
    remaining = queue_ids(conn) & all_old
    archived = set(archived_ids(directory))
    assert remaining | archived >= all_old
    assert not set(old_mail["old"][days[0]]) & remaining
    if stage == "written":
        assert not archive_path(directory, days[1]).exists()
    if stage in ("written", "archived"):
        assert set(old_mail["old"][days[1]]) <= remaining
    report = maintain(db_url, settings)
    assert not report.errors
    assert sorted(archived_ids(directory)) == sorted(all_old)
    assert queue_ids(conn) == {old_mail["recent"], old_mail["pending"]}
    assert not list(directory.glob("*.tmp"))


def test_later_email_of_an_archived_day_joins_its_file_without_duplicates(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, old_mail: dict[str, Any]
) -> None:
    day = old_mail["days"][0]
    early, late = old_mail["old"][day]
    # At noon of day + 90, only the 01:00 email is old enough.
    first_now = datetime(day.year, day.month, day.day, 12, tzinfo=UTC) + timedelta(days=90)
    maintain(db_url, settings, now=first_now)
    path = archive_path(archive_directory(settings), day)
    assert [i for i, _ in read_archive(path)] == [early]
    maintain(db_url, settings)
    assert [i for i, _ in read_archive(path)] == [early, late]
    assert not {early, late} & queue_ids(conn)


def test_damaged_archive_file_keeps_its_day_in_the_database(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, old_mail: dict[str, Any]
) -> None:
    directory = archive_directory(settings)
    directory.mkdir(parents=True)
    damaged = archive_path(directory, old_mail["days"][1])
    truncated = gzip.compress(b'{"id": 1}\n')[:-6]
    damaged.write_bytes(truncated)
    report = maintain(db_url, settings)
    assert len(report.errors) == 1 and str(damaged) in report.errors[0]
    assert set(old_mail["old"][old_mail["days"][1]]) <= queue_ids(conn)
    assert {s.name: s.rows for s in report.steps}["archive_sent"] == 4
    assert damaged.read_bytes() == truncated


def test_inbox_rows_past_the_window_are_purged(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings
) -> None:
    for key, age in (("old", 31), ("edge", 29), ("new", 0)):
        conn.execute(
            "INSERT INTO mailroom.inbox (message_id, consumer, event_type, payload, received_at)"
            " VALUES (%s, 'shop', 'order_placed', '{}', %s)",
            (key, NOW - timedelta(days=age)),
        )
    conn.commit()
    report = maintain(db_url, settings)
    rows = conn.execute("SELECT message_id FROM mailroom.inbox ORDER BY 1").fetchall()
    assert [r["message_id"] for r in rows] == ["edge", "new"]
    assert {s.name: s.rows for s in report.steps}["purge_inbox"] == 1


def partitions(conn: psycopg.Connection[Any], parent: str) -> list[str]:
    conn.commit()
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass ORDER BY 1",
        (f"mailroom.{parent}",),
    ).fetchall()
    return [r["relname"] for r in rows]


def test_partitions_are_made_ahead_and_dropped_past_retention(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings
) -> None:
    this_month = NOW.date().replace(day=1)
    conn.execute(
        "INSERT INTO mailroom.send_logs (attempted_at, email_id, recipient_email, attempt, outcome)"
        " VALUES (%s, 1, 'a@example.com', 1, 'sent')",
        (datetime(this_month.year, this_month.month, 2, tzinfo=UTC),),
    )
    conn.commit()
    later = NOW + timedelta(days=365 * 2 + 40)
    short = replace(settings, log_retention_months=24, partitions_ahead_months=2)
    before = partitions(conn, "send_logs")
    dry = maintain(db_url, short, now=later, dry_run=True)
    assert partitions(conn, "send_logs") == before
    report = maintain(db_url, short, now=later)
    steps = {s.name: s for s in report.steps}
    months = [f"{m:%Y_%m}" for m in (later.date().replace(day=1),)]
    names = partitions(conn, "send_logs")
    assert f"send_logs_{months[0]}" in names
    assert f"send_logs_{this_month:%Y_%m}" not in names and "send_logs_default" in names
    assert steps["create_partitions"].rows == 9 == {s.name: s.rows for s in dry.steps}["create_partitions"]
    # The 0001 partitions started the month before install: this month's one held the row.
    assert any(
        d.startswith(f"archived send_logs_{this_month:%Y_%m} (1 row(s)) to ")
        for d in steps["drop_partitions"].details
    )
    assert steps["drop_partitions"].rows == {s.name: s.rows for s in dry.steps}["drop_partitions"] >= 1
    assert {s.name: s.rows for s in maintain(db_url, short, now=later).steps}["create_partitions"] == 0


def test_second_concurrent_run_is_skipped(db_url: str, settings: Settings, old_mail: dict[str, Any]) -> None:
    from worker.ops.retention import MAINTENANCE_LOCK_KEY

    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MAINTENANCE_LOCK_KEY,))
        report = maintain(db_url, settings)
    assert report.skipped and not report.steps
    assert not archive_directory(settings).exists()


async def test_worker_producer_runs_once_per_interval(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, old_mail: dict[str, Any]
) -> None:
    from worker.cli.wiring import worker_producers
    from worker.ops.maintenance import PRODUCER

    assert PRODUCER in worker_producers()  # `mailroom worker` runs it
    settings = replace(
        settings, database_url=None
    )  # the maintenance thread reaches the server by the DSN in use
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        assert await PRODUCER.run_once(aconn, settings) == 0
        assert queue_ids(conn) == {old_mail["recent"], old_mail["pending"]}
        again = sent_email(conn, settings, NOW - timedelta(days=200))
        assert await PRODUCER.run_once(aconn, settings) == 0
        assert again in queue_ids(conn)  # not yet: the hour has not passed
        conn.execute(
            "UPDATE mailroom.jobs SET last_run_at = now() - interval '2 hours' WHERE name = 'retention'"
        )
        conn.commit()
        await PRODUCER.run_once(aconn, settings)
    assert again not in queue_ids(conn)


def test_maintenance_cli_reports_each_step(
    cli_env: dict[str, str], settings: Settings, old_mail: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli.main import main

    assert main(["maintenance", "run", "--dry-run"]) == 0
    out, _ = capsys.readouterr()
    assert "archive_sent: would touch 6 row(s)" in out and "purge_inbox: would touch 0 row(s)" in out
    assert main(["maintenance", "run", "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert [s["name"] for s in report["steps"]] == STEPS
    assert report["steps"][0]["rows"] == 6 and "maintenance: archive_sent" in err
    assert os.listdir(Path(cli_env["MAILROOM_HOME"]) / "archive")


def test_unwritable_archive_directory_is_reported_and_nothing_deleted(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, old_mail: dict[str, Any], tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    before = queue_ids(conn)
    report = maintain(db_url, replace(settings, archive_dir=blocker))
    assert len(report.errors) == 3 and all("archive_sent" in e for e in report.errors)
    assert queue_ids(conn) == before
    assert [s.name for s in report.steps] == STEPS


def test_archive_file_of_another_database_stops_its_day_and_deletes_nothing(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, old_mail: dict[str, Any]
) -> None:
    # A file left by another database (or by this one before a reset) holds other emails under the
    # same ids. Merging into it used to skip this database's emails as "already archived" and delete them.
    directory = archive_directory(settings)
    directory.mkdir(parents=True)
    day = old_mail["days"][1]
    foreign = [
        json.dumps({"id": i, "created_at": "2020-01-01T00:00:00+00:00", "subject": "someone else's"}) + "\n"
        for i in old_mail["old"][day]
    ]
    path = archive_path(directory, day)
    path.write_bytes(gzip.compress("".join(foreign).encode()))
    before = path.read_bytes()
    report = maintain(db_url, settings)
    assert len(report.errors) == 1 and "belongs to another database" in report.errors[0]
    assert set(old_mail["old"][day]) <= queue_ids(conn)
    assert path.read_bytes() == before
    assert {s.name: s.rows for s in report.steps}["archive_sent"] == 4


def test_archive_directory_locked_by_another_process_is_left_alone(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, old_mail: dict[str, Any]
) -> None:
    import fcntl

    # Another database's maintenance (same directory, so not kept out by this database's advisory
    # lock) is rewriting files: writing ours now could replace its file after it deleted its rows.
    directory = archive_directory(settings)
    directory.mkdir(parents=True)
    holder = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        before = queue_ids(conn)
        report = maintain(db_url, settings)
        assert len(report.errors) == 3 and all("being written by another process" in e for e in report.errors)
        assert queue_ids(conn) == before and not list(directory.iterdir())
    finally:
        os.close(holder)
    assert not maintain(db_url, settings).errors
    assert queue_ids(conn) == {old_mail["recent"], old_mail["pending"]}


def test_month_with_rows_in_the_default_partition_still_gets_its_partition(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings
) -> None:
    # Maintenance did not run for longer than the months made ahead: this month's opens went to the
    # default partition, and PostgreSQL refuses to create a partition over them. That used to fail
    # every later month of the table too, run after run.
    later = NOW + timedelta(days=240)
    month = later.date().replace(day=1)
    conn.execute(
        "INSERT INTO mailroom.open_events (occurred_at, email_id) VALUES (%s, 7), (%s, 8)",
        (datetime(month.year, month.month, 3, tzinfo=UTC), datetime(month.year, month.month, 28, tzinfo=UTC)),
    )
    conn.commit()
    report = maintain(db_url, settings, now=later)
    assert not report.errors
    names = partitions(conn, "open_events")
    assert all(
        f"open_events_{m:%Y_%m}" in names for m in (month, (month + timedelta(days=95)).replace(day=1))
    )
    rows = conn.execute(
        "SELECT tableoid::regclass::text AS part, email_id FROM mailroom.open_events ORDER BY email_id"
    ).fetchall()
    assert rows == [{"part": f"mailroom.open_events_{month:%Y_%m}", "email_id": i} for i in (7, 8)]
    steps = {s.name: s for s in report.steps}
    assert (
        f"open_events_{month:%Y_%m}: 2 row(s) moved in from open_events_default"
        in steps["create_partitions"].details
    )
    # The moved-into partition takes new rows like any other.
    conn.execute("INSERT INTO mailroom.open_events (occurred_at, email_id) VALUES (%s, 9)", (later,))
    conn.commit()
