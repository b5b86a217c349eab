"""The archive over years: send logs archived before their month leaves the database, every file checksummed,
verified, restored for one address or one period, erased for another, and deleted past its retention."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.producers.helpers import NOW, sent_email
from worker.cli.main import main
from worker.core.config import Settings
from worker.ops.archive_files import (
    archive_directory,
    archive_path,
    checksum_path,
    file_sha256,
    read_archive,
    recorded_sha256,
    send_log_path,
    write_archive_atomically,
)
from worker.ops.retention import run_maintenance

THIS_MONTH = NOW.date().replace(day=1)
# Past 24 months of log retention (and far past the email archive ages).
LATER = NOW + timedelta(days=365 * 2 + 40)
# Three years back: no partition holds it, so it sits in the default partition.
ANCIENT = datetime(NOW.year - 3, 3, 10, 9, 30, tzinfo=UTC)


def maintain(db_url: str, settings: Settings, now: datetime = LATER, **kwargs: Any) -> Any:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return run_maintenance(conn, settings, now=now, **kwargs)


def log_attempt(conn: psycopg.Connection[Any], at: datetime, to: str, response: str = "250 ok") -> int:
    row = conn.execute(
        "INSERT INTO mailroom.send_logs (attempted_at, email_id, recipient_email, attempt, outcome, response)"
        " VALUES (%s, 1, %s, 1, 'sent', %s) RETURNING id",
        (at, to, response),
    ).fetchone()
    conn.commit()
    assert row is not None
    return int(row["id"])


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for _, line in read_archive(path)]


def partitions(conn: psycopg.Connection[Any]) -> set[str]:
    conn.commit()
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'mailroom.send_logs'::regclass"
    ).fetchall()
    return {r["relname"] for r in rows}


def logs_between(conn: psycopg.Connection[Any], start: date, end: date) -> list[int]:
    conn.commit()
    rows = conn.execute(
        "SELECT id FROM mailroom.send_logs WHERE attempted_at >= %s AND attempted_at < %s ORDER BY id",
        (
            datetime(start.year, start.month, start.day, tzinfo=UTC),
            datetime(end.year, end.month, end.day, tzinfo=UTC),
        ),
    ).fetchall()
    return [int(r["id"]) for r in rows]


@pytest.fixture
def history(conn: psycopg.Connection[Any], settings: Settings) -> dict[str, Any]:
    """Send logs of this month (its partition) and of three years ago (the default partition), for ada and bob."""
    at = datetime(THIS_MONTH.year, THIS_MONTH.month, 2, 8, tzinfo=UTC)
    month = [
        log_attempt(conn, at, "Ada@Example.com", "250 2.0.0 queued for ada@example.com"),
        log_attempt(conn, at + timedelta(hours=1), "bob@example.com"),
        log_attempt(conn, at + timedelta(hours=2), "ada@example.com"),
    ]
    ancient = [log_attempt(conn, ANCIENT, "bob@example.com"), log_attempt(conn, ANCIENT, "ada@example.com")]
    return {"month": month, "ancient": ancient, "dir": archive_directory(settings)}


def test_send_logs_are_archived_checksummed_and_read_back_before_their_month_leaves_the_database(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, history: dict[str, Any]
) -> None:
    partition = f"send_logs_{THIS_MONTH:%Y_%m}"
    assert partition in partitions(conn)
    dry = maintain(db_url, settings, dry_run=True)
    assert partition in partitions(conn) and not history["dir"].exists()
    assert any(f"would archive {partition} (3 row(s))" in d for s in dry.steps for d in s.details)

    report = maintain(db_url, settings)
    assert not report.errors
    assert partition not in partitions(conn)
    path = send_log_path(history["dir"], THIS_MONTH)
    kept = records(path)
    assert [r["id"] for r in kept] == history["month"]
    assert kept[0]["recipient_email"] == "Ada@Example.com" and kept[0]["outcome"] == "sent"
    assert recorded_sha256(path) == file_sha256(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600" == oct(checksum_path(path).stat().st_mode & 0o777)
    # `sha256sum -c` reads the checksum file as it is.
    assert checksum_path(path).read_text() == f"{file_sha256(path)}  {path.name}\n"
    # The default partition's rows of an old month went to that month's file, then left.
    old = send_log_path(history["dir"], ANCIENT.date().replace(day=1))
    assert [r["id"] for r in records(old)] == history["ancient"]
    assert logs_between(conn, date(ANCIENT.year, 1, 1), date(ANCIENT.year + 1, 1, 1)) == []


def test_a_rerun_after_a_crash_between_the_file_and_the_delete_doubles_nothing(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, history: dict[str, Any]
) -> None:
    maintain(db_url, settings)
    old = send_log_path(history["dir"], ANCIENT.date().replace(day=1))
    # The state a run killed after its rename and before its DELETE leaves: the rows in the file and
    # in the database. Then a later row of the same month arrives.
    for record in records(old):
        conn.execute(
            "INSERT INTO mailroom.send_logs (id, attempted_at, email_id, recipient_email, attempt, outcome)"
            " OVERRIDING SYSTEM VALUE VALUES (%s, %s, 1, %s, 1, 'sent')",
            (record["id"], record["attempted_at"], record["recipient_email"]),
        )
    late = log_attempt(conn, ANCIENT + timedelta(days=5), "carol@example.com")
    report = maintain(db_url, settings)
    assert not report.errors
    assert [r["id"] for r in records(old)] == [*history["ancient"], late]
    assert logs_between(conn, date(ANCIENT.year, 1, 1), date(ANCIENT.year + 1, 1, 1)) == []
    assert recorded_sha256(old) == file_sha256(old)


def test_a_file_of_another_database_keeps_the_month_in_the_database(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, history: dict[str, Any]
) -> None:
    month = ANCIENT.date().replace(day=1)
    directory: Path = history["dir"]
    directory.mkdir(parents=True)
    foreign = {
        "id": history["ancient"][0],
        "attempted_at": "2001-01-01T00:00:00+00:00",
        "recipient_email": "x@y.z",
    }
    with gzip.open(send_log_path(directory, month), "wt") as out:
        out.write(json.dumps(foreign) + "\n")
    report = maintain(db_url, settings)
    assert any("belongs to another database" in e for e in report.errors)
    start = date(ANCIENT.year, 1, 1)
    assert logs_between(conn, start, date(ANCIENT.year + 1, 1, 1)) == history["ancient"]
    assert records(send_log_path(directory, month)) == [foreign]


def test_verify_finds_altered_unchecksummed_and_broken_files(
    db_url: str,
    settings: Settings,
    history: dict[str, Any],
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    maintain(db_url, settings)
    directory: Path = history["dir"]
    assert main(["archive", "verify"]) == 0
    out, err = capsys.readouterr()
    assert "2 file(s), 5 record(s) read: no file(s) with a problem" in out and "verified 2/2 files" in err
    assert main(["archive", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {(f["kind"], f["period"], f["checksum"]) for f in listed} == {
        ("send-logs", f"{THIS_MONTH:%Y-%m}", True),
        ("send-logs", f"{ANCIENT:%Y-%m}", True),
    }

    recent = send_log_path(directory, THIS_MONTH)
    data = bytearray(recent.read_bytes())
    data[len(data) // 2] ^= 0x01
    recent.write_bytes(bytes(data))
    old = send_log_path(directory, ANCIENT.date().replace(day=1))
    checksum_path(old).unlink()
    assert main(["archive", "verify"]) == 1
    out, _ = capsys.readouterr()
    assert f"{recent.name}: its bytes do not match the checksum" in out
    assert f"{old.name}: no {old.name}.sha256" in out
    assert "2 file(s) with a problem" in out
    doubled = send_log_path(directory, date(ANCIENT.year - 1, 1, 1))
    write_archive_atomically(doubled, iter(['{"id": 7}\n', '{"id": 7}\n']))
    assert main(["archive", "verify", "--period", f"{ANCIENT.year - 1}"]) == 1
    assert f"{doubled.name}: record 7 is held twice or out of order" in capsys.readouterr().out
    assert main(["archive", "verify", "--period", f"{ANCIENT:%Y}"]) == 1
    assert "1 file(s)" in capsys.readouterr().out
    assert main(["archive", "verify", "--period", "last-year"]) == 2


def test_restore_one_address_and_one_period_audited_and_an_altered_file_refused(
    db_url: str,
    conn: psycopg.Connection[Any],
    settings: Settings,
    history: dict[str, Any],
    cli_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    email = sent_email(conn, settings, NOW - timedelta(days=400), to="ada@example.com")
    sent_email(conn, settings, NOW - timedelta(days=400), to="bob@example.com")
    maintain(db_url, settings)

    out_file = tmp_path / "ada.jsonl"
    assert main(["archive", "restore", "--address", "ADA@example.com", "-o", str(out_file)]) == 0
    assert oct(out_file.stat().st_mode & 0o777) == "0o600"
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert {(r["kind"], r["id"]) for r in lines} == {
        ("emails", email),
        *(("send-logs", i) for i in (history["month"][0], history["month"][2], history["ancient"][1])),
    }
    conn.commit()
    row = conn.execute(
        "SELECT target, affected FROM mailroom.audit_log WHERE action = 'archive.restore' ORDER BY id DESC"
    ).fetchone()
    assert row is not None and row["affected"] == 4 and "ada@example.com" not in row["target"]

    assert main(["archive", "restore", "--period", f"{ANCIENT:%Y-%m}", "--kind", "send-logs"]) == 0
    period = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in period] == history["ancient"]

    altered = send_log_path(history["dir"], THIS_MONTH)
    altered.write_bytes(altered.read_bytes() + b"\0")
    assert main(["archive", "restore", "--period", f"{THIS_MONTH:%Y-%m}", "--kind", "send-logs"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "does not match its checksum" in err
    assert main(["archive", "restore"]) == 2
    assert main(["archive", "restore", "--address", "ada@example.com", "--period", "2024"]) == 2


def test_privacy_erase_reaches_send_log_archives_and_leaves_them_verifiable(
    db_url: str,
    conn: psycopg.Connection[Any],
    settings: Settings,
    history: dict[str, Any],
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from worker.ops.privacy import erase_address, export_address

    maintain(db_url, settings)
    directory: Path = history["dir"]
    exported = export_address(conn, "ada@example.com", directory)
    conn.commit()
    assert sorted(r["id"] for r in exported["archived_send_logs"]) == sorted(
        [history["month"][0], history["month"][2], history["ancient"][1]]
    )
    report = erase_address(conn, "ada@example.com", archive_dir=directory)
    conn.commit()
    assert report.rows["archived_send_logs"] == 3
    text = "".join(line for p in directory.glob("send-logs-*.jsonl.gz") for _, line in read_archive(p))
    assert "ada@example.com" not in text.lower() and report.replacement in text
    assert text.count("bob@example.com") == 2  # bob's records are untouched
    assert main(["archive", "verify"]) == 0
    capsys.readouterr()
    assert main(["archive", "restore", "--address", "ada@example.com"]) == 0
    assert capsys.readouterr().out == ""


def test_files_past_the_archive_retention_are_overwritten_and_deleted(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings, history: dict[str, Any]
) -> None:
    sent_email(conn, settings, NOW - timedelta(days=400))
    maintain(db_url, settings)
    directory: Path = history["dir"]
    old = send_log_path(directory, ANCIENT.date().replace(day=1))
    day = (NOW - timedelta(days=400)).date()
    email_file = archive_path(directory, day)
    recent = send_log_path(directory, THIS_MONTH)
    assert old.exists() and email_file.exists() and recent.exists()
    # A second name for the old file's bytes: deleting the name alone would leave them readable here.
    witness = directory.parent / "witness"
    os.link(old, witness)

    # Seven years after the old month: it is past retention; the others are not.
    later = datetime(ANCIENT.year + 7, 5, 1, tzinfo=UTC)
    short = replace(settings, log_retention_months=24 * 12)
    dry = maintain(db_url, short, now=later, dry_run=True)
    assert {s.name: s.rows for s in dry.steps}["expire_archives"] == 1 and old.exists()
    report = maintain(db_url, short, now=later)
    step = {s.name: s for s in report.steps}["expire_archives"]
    before = (later - timedelta(days=settings.archive_retention_days)).date()
    assert step.details == [f"deleted {old.name} (ended {date(ANCIENT.year, 4, 1)}, before {before})"]
    assert not old.exists() and not checksum_path(old).exists()
    assert witness.read_bytes() == b""
    assert email_file.exists() and recent.exists()


def test_a_database_backup_names_the_archive_it_does_not_hold(
    db_url: str,
    settings: Settings,
    history: dict[str, Any],
    cli_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "backup.dump"
    assert main(["db", "backup", str(target)]) == 0
    assert "archive file" not in capsys.readouterr().out  # nothing archived yet: nothing to say
    maintain(db_url, settings)
    assert main(["db", "backup", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"not in this backup: 2 archive file(s) in {history['dir']}" in out
    assert "mailroom archive verify" in out
