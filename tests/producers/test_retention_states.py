"""Retention of every final state: failed, expired, cancelled, suppressed and sent email, each after its own age."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.producers.helpers import AGES, BOUNCE, finished_email, sent_email
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.engine.claim import EXPIRED
from worker.ops.archive_files import archive_directory, archive_path, read_archive
from worker.ops.retention import run_maintenance
from worker.tracking.campaigns import campaign_stats


@pytest.fixture
def aged(settings: Settings) -> Settings:
    """Settings with a distinct age per final state."""
    return replace(
        settings,
        archive_after_days=AGES["sent"],
        archive_failed_after_days=AGES["failed"],
        archive_expired_after_days=AGES["expired"],
        archive_cancelled_after_days=AGES["cancelled"],
        archive_suppressed_after_days=AGES["suppressed"],
    )


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT now() AS now").fetchone()
    assert row is not None
    conn.commit()
    return row["now"]  # type: ignore[no-any-return]


def unfinished(conn: psycopg.Connection[Any], settings: Settings, long_ago: datetime) -> list[int]:
    """A pending and an assigned email, both carrying an ancient finished_at that must not matter."""
    pending = enqueue(conn, EmailRequest(to="p@example.com", subject="Waiting", text="x"), settings=settings)
    assigned = enqueue(conn, EmailRequest(to="q@example.com", subject="Sending", text="x"), settings=settings)
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 't', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 hour' WHERE id = %s",
        (assigned,),
    )
    conn.execute(
        "UPDATE mailroom.email_queue SET finished_at = %s WHERE id = ANY(%s)", (long_ago, [pending, assigned])
    )
    conn.commit()
    return [pending, assigned]


def queue_ids(conn: psycopg.Connection[Any]) -> set[int]:
    conn.commit()
    return {int(r["id"]) for r in conn.execute("SELECT id FROM mailroom.email_queue").fetchall()}


def maintain(db_url: str, settings: Settings, **kwargs: Any) -> Any:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return run_maintenance(conn, settings, **kwargs)


def utc_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def records(settings: Settings, state: str, day: date) -> list[dict[str, Any]]:
    return [
        json.loads(line) for _, line in read_archive(archive_path(archive_directory(settings), day, state))
    ]


@pytest.fixture
def mail(conn: psycopg.Connection[Any], aged: Settings) -> dict[str, Any]:
    """Per final state one email an hour past its age and one an hour short of it; a pending and an assigned one."""
    now = db_now(conn)
    old, young = {}, {}
    for state, days in AGES.items():
        old[state] = finished_email(conn, aged, state, now - timedelta(days=days, hours=1))
        young[state] = finished_email(conn, aged, state, now - timedelta(days=days, hours=-1))
    return {
        "now": now,
        "old": old,
        "young": young,
        "unfinished": unfinished(conn, aged, now - timedelta(days=400)),
    }


def test_each_final_state_is_archived_and_deleted_after_its_own_age_and_nothing_else_is(
    db_url: str, conn: psycopg.Connection[Any], aged: Settings, mail: dict[str, Any]
) -> None:
    report = maintain(db_url, aged)
    assert not report.errors
    assert queue_ids(conn) == set(mail["young"].values()) | set(mail["unfinished"])
    for state, days in AGES.items():
        [record] = records(aged, state, utc_day(mail["now"] - timedelta(days=days, hours=1)))
        assert record["id"] == mail["old"][state], state
    steps = {s.name: s.rows for s in report.steps}
    assert {state: steps[f"archive_{state}"] for state in AGES} == dict.fromkeys(AGES, 1)
    none = {"bounced": {"due": 0, "archived": 0, "deleted": 0}}  # no email was bounced by a DSN here
    assert report.retention_summary() == {s: {"due": 1, "archived": 1, "deleted": 1} for s in AGES} | none
    # A second run finds nothing older than any state's age, and still leaves pending and assigned rows.
    again = maintain(db_url, aged)
    assert again.retention_summary() == {
        s: {"due": 0, "archived": 0, "deleted": 0} for s in (*AGES, "bounced")
    }
    assert set(mail["unfinished"]) <= queue_ids(conn)


def test_no_final_state_row_older_than_its_setting_is_left(
    db_url: str, conn: psycopg.Connection[Any], aged: Settings, mail: dict[str, Any]
) -> None:
    maintain(db_url, aged)
    left = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'sent' AND sent_at < now() - make_interval(days => %(sent)s))"
        " + count(*) FILTER (WHERE status = 'failed' AND last_error <> %(reason)s"
        "                    AND finished_at < now() - make_interval(days => %(failed)s))"
        " + count(*) FILTER (WHERE status = 'failed' AND last_error = %(reason)s"
        "                    AND finished_at < now() - make_interval(days => %(expired)s))"
        " + count(*) FILTER (WHERE status = 'cancelled' AND finished_at < now() - make_interval(days => %(cancelled)s))"
        " + count(*) FILTER (WHERE status = 'suppressed' AND finished_at < now() - make_interval(days => %(suppressed)s))"
        " AS n FROM mailroom.email_queue",
        {**AGES, "reason": EXPIRED},
    ).fetchone()
    assert left == {"n": 0}


def test_archived_records_carry_the_final_status_and_last_error(
    db_url: str, conn: psycopg.Connection[Any], aged: Settings, mail: dict[str, Any]
) -> None:
    maintain(db_url, aged)
    seen = {}
    for state, days in AGES.items():
        [record] = records(aged, state, utc_day(mail["now"] - timedelta(days=days, hours=1)))
        seen[state] = (record["status"], record["last_error"], record["finished_at"] is not None)
    assert seen == {
        "sent": ("sent", None, True),
        "failed": ("failed", BOUNCE.format(to="a@example.com"), True),
        "expired": ("failed", EXPIRED, True),
        "cancelled": ("cancelled", None, True),
        "suppressed": ("suppressed", None, True),
    }
    directory = archive_directory(aged)
    assert sorted(p.name.rsplit("-", 3)[0] for p in directory.glob("*.gz")) == sorted(
        ["emails"] + [f"emails-{s}" for s in AGES if s != "sent"]
    )


def test_a_row_that_leaves_its_state_while_being_archived_stays_in_the_queue(
    db_url: str, conn: psycopg.Connection[Any], aged: Settings
) -> None:
    now = db_now(conn)
    failed = finished_email(conn, aged, "failed", now - timedelta(days=40))

    def retry_it(stage: str, _day: Any) -> None:
        # Between the file's read-back and the delete, an operator retries the email.
        if stage == "archived":
            with psycopg.connect(db_url, autocommit=True) as other:
                other.execute("UPDATE mailroom.email_queue SET status = 'pending' WHERE id = %s", (failed,))

    report = maintain(db_url, aged, checkpoint=retry_it)
    assert not report.errors and report.retention["failed"].deleted == 0
    row = conn.execute("SELECT status FROM mailroom.email_queue WHERE id = %s", (failed,)).fetchone()
    assert row == {"status": "pending"}


def test_dry_run_counts_every_state_and_changes_nothing(
    db_url: str, conn: psycopg.Connection[Any], aged: Settings, mail: dict[str, Any]
) -> None:
    before = queue_ids(conn)
    report = maintain(db_url, aged, dry_run=True)
    none = {"bounced": {"due": 0, "archived": 0, "deleted": 0}}
    assert report.retention_summary() == {s: {"due": 1, "archived": 0, "deleted": 0} for s in AGES} | none
    assert queue_ids(conn) == before and not archive_directory(aged).exists()


def test_campaign_email_of_every_final_state_stays_counted_with_status_and_masked_error(
    db_url: str, conn: psycopg.Connection[Any], aged: Settings
) -> None:
    now = db_now(conn)
    ids = {
        state: finished_email(
            conn, aged, state, now - timedelta(days=100), to="ada@example.com", campaign="spring"
        )
        for state in AGES
    }
    before = campaign_stats(conn, "spring")
    conn.commit()
    maintain(db_url, aged)
    assert not queue_ids(conn) & set(ids.values())
    after = campaign_stats(conn, "spring")
    assert after == before and (after.sent, after.failed, after.bounced, after.suppressed) == (1, 2, 1, 1)
    rows = conn.execute(
        "SELECT email_id, status, last_error, bounced, finished_at IS NOT NULL AS finished"
        " FROM mailroom.archived_emails ORDER BY email_id"
    ).fetchall()
    assert {r["email_id"]: (r["status"], r["last_error"], r["bounced"], r["finished"]) for r in rows} == {
        ids["sent"]: ("sent", None, False, True),
        ids["failed"]: ("failed", "550 5.1.1 <***@example.com>: user unknown", True, True),
        ids["expired"]: ("failed", EXPIRED, False, True),
        ids["cancelled"]: ("cancelled", None, False, True),
        ids["suppressed"]: ("suppressed", None, False, True),
    }


def test_maintenance_reports_each_state_in_its_output_json_and_log_line(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    settings: Settings,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from worker.cli.main import main

    now = db_now(conn)
    finished_email(conn, settings, "failed", now - timedelta(days=31))
    finished_email(conn, settings, "cancelled", now - timedelta(days=8))
    finished_email(conn, settings, "cancelled", now - timedelta(days=6))
    with caplog.at_level(logging.INFO, logger="worker.ops.retention"):
        assert main(["maintenance", "run"]) == 0
    out, _ = capsys.readouterr()
    assert "  failed     older than 30 day(s): 1 due, 1 archived, 1 deleted" in out
    assert "  cancelled  older than 7 day(s): 1 due, 1 archived, 1 deleted" in out
    assert "  suppressed older than 7 day(s): 0 due, 0 archived, 0 deleted" in out
    [line] = [r for r in caplog.records if r.getMessage().startswith("maintenance: retention")]
    fields = line.__dict__["fields"]
    assert fields["event"] == "retention" and fields["cancelled"] == {"due": 1, "archived": 1, "deleted": 1}
    assert "failed 1 archived / 1 deleted" in line.getMessage()
    finished_email(conn, settings, "suppressed", now - timedelta(days=8))
    assert main(["maintenance", "run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["retention"]["suppressed"] == {
        "age_days": 7,
        "cutoff": report["retention"]["suppressed"]["cutoff"],
        "due": 1,
        "archived": 1,
        "deleted": 1,
    }
    assert report["retention"]["failed"]["deleted"] == 0


def test_default_ages_and_their_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = Settings.from_env()
    assert (
        defaults.archive_after_days,
        defaults.archive_failed_after_days,
        defaults.archive_expired_after_days,
        defaults.archive_cancelled_after_days,
        defaults.archive_suppressed_after_days,
    ) == (90, 30, 30, 7, 7)
    for state, value in (("FAILED", "3"), ("EXPIRED", "4"), ("CANCELLED", "1"), ("SUPPRESSED", "2")):
        monkeypatch.setenv(f"MAILROOM_ARCHIVE_{state}_AFTER_DAYS", value)
    read = Settings.from_env()
    assert (
        read.archive_failed_after_days,
        read.archive_expired_after_days,
        read.archive_cancelled_after_days,
        read.archive_suppressed_after_days,
    ) == (3, 4, 1, 2)


def test_rows_archived_before_the_revision_become_sent_ones_and_the_undo_restores_0005(
    empty_db_url: str,
) -> None:
    from worker.core import db
    from worker.core.schema import dump_schema

    db.upgrade(empty_db_url, "0005")
    at_0005 = dump_schema(empty_db_url)
    with psycopg.connect(empty_db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.archived_emails (email_id, sent_at, campaign_id, track_opens, track_clicks)"
            " VALUES (7, '2026-01-02 03:04:05+00', 'spring', true, false)"
        )
    db.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url) as conn:
        row = conn.execute(
            "SELECT status, finished_at = sent_at, last_error, bounced FROM mailroom.archived_emails"
        ).fetchone()
    assert row == ("sent", True, None, False)
    db.downgrade(empty_db_url, "0005")
    assert dump_schema(empty_db_url) == at_0005


def test_email_a_dsn_turned_bounced_is_archived_by_the_sent_age_and_counted_in_its_campaign(
    conn: psycopg.Connection[Any], aged: Settings, db_url: str
) -> None:
    now = db_now(conn)
    old = sent_email(conn, aged, now - timedelta(days=AGES["sent"], hours=1), to="old@example.com")
    young = sent_email(conn, aged, now - timedelta(days=AGES["sent"] - 1), to="young@example.com")
    conn.execute("UPDATE mailroom.email_queue SET campaign_id = 'spring' WHERE id = ANY(%s)", ([old, young],))
    conn.execute("UPDATE mailroom.email_queue SET status = 'bounced' WHERE id = ANY(%s)", ([old, young],))
    conn.commit()
    with psycopg.connect(db_url, autocommit=True) as maintenance:
        report = run_maintenance(maintenance, aged, now=now)
    assert report.retention_summary()["bounced"] == {"due": 1, "archived": 1, "deleted": 1}
    left = conn.execute("SELECT id FROM mailroom.email_queue ORDER BY id").fetchall()
    assert [r["id"] for r in left] == [young]
    [path] = archive_directory(aged).glob("emails-bounced-*.jsonl.gz")
    records = [json.loads(line) for _, line in read_archive(path)]
    assert [(r["id"], r["status"]) for r in records] == [(old, "bounced")]
    archived = conn.execute(
        "SELECT status, bounced FROM mailroom.archived_emails WHERE email_id = %s", (old,)
    )
    assert archived.fetchone() == {"status": "bounced", "bounced": True}
