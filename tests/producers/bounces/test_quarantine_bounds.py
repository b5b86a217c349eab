"""The bounce quarantine stays bounded against unauthenticated senders: a per-client daily limit, a total
size, a compact copy of each message, and a retention that maintenance applies."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from worker.cli.main import main
from worker.core.config import Settings
from worker.ops.retention import run_maintenance
from worker.producers.bounces import ingest
from worker.producers.bounces.quarantine import QUARANTINE_CAP

KEY = b"k" * 32
MIB = 1 << 20


def _junk(i: int, size: int = 100) -> bytes:
    """A distinct message that is no report at all (what anybody may send to a bounce address)."""
    return b"Subject: buy now %d\r\n\r\n" % i + b"x" * size + b"\r\n"


def _ingest_cli(tmp_path: Path, raw: bytes, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "m.eml"
    path.write_bytes(raw)
    assert main(["bounces", "ingest", str(path)]) == 0
    return capsys.readouterr().out


def _rows(db_url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(query).fetchall()


def test_a_client_past_its_daily_limit_is_dropped_and_counted_not_stored(
    db_url: str,
    cli_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MAILROOM_QUARANTINE_CLIENT_DAILY_MAX", "3")
    for i in range(5):
        assert _ingest_cli(tmp_path, _junk(i), capsys).startswith("bounces: quarantined")
    # A message seen before is neither stored again nor counted against the limit.
    _ingest_cli(tmp_path, _junk(0), capsys)
    assert _rows(db_url, "SELECT client, count(*) FROM mailroom.bounce_quarantine GROUP BY 1") == [
        ("pipe", 3)
    ]
    assert _rows(db_url, "SELECT client, day, kept, dropped FROM mailroom.bounce_quarantine_clients") == [
        ("pipe", datetime.now(UTC).date(), 3, 2)
    ]
    # Another client has its own limit.
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert ingest(conn, _junk(9), KEY, client="198.51.100.7").verdict == "quarantined"
    assert _rows(db_url, "SELECT count(*) FROM mailroom.bounce_quarantine WHERE client = '198.51.100.7'") == [
        (1,)
    ]


def test_the_quarantine_never_holds_more_than_its_total_size(
    db_url: str,
    cli_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MAILROOM_QUARANTINE_MAX_BYTES", str(MIB))
    for i in range(24):
        _ingest_cli(tmp_path, _junk(i, 100_000), capsys)
    ((held, kept),) = _rows(
        db_url,
        "SELECT sum(octet_length(raw) + octet_length(reason) + coalesce(octet_length(envelope_recipient), 0)"
        " + coalesce(octet_length(client), 0)), count(*) FROM mailroom.bounce_quarantine",
    )
    # Full: it holds at most the limit, and no room is left for one more message.
    assert MIB - QUARANTINE_CAP - 1000 < held <= MIB
    ((dropped,),) = _rows(db_url, "SELECT dropped FROM mailroom.bounce_quarantine_clients")
    assert dropped == 24 - kept


def test_a_large_message_is_kept_cut_with_a_note_saying_how_much(
    db_url: str, cli_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _junk(1, 300_000)
    _ingest_cli(tmp_path, raw, capsys)
    ((kept, size, reason),) = _rows(
        db_url, "SELECT length(raw), raw_size, reason FROM mailroom.bounce_quarantine"
    )
    assert (kept, size) == (QUARANTINE_CAP, len(raw))
    assert reason.endswith(f"(kept the first {QUARANTINE_CAP} of {len(raw)} bytes)")


def test_maintenance_deletes_quarantined_messages_past_their_retention(
    db_url: str, settings: Settings
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(3):
            ingest(conn, _junk(i), KEY, client="pipe")
        conn.execute(
            "UPDATE mailroom.bounce_quarantine SET received_at = now() - interval '31 days' WHERE id <= 2"
        )
        conn.execute("UPDATE mailroom.bounce_quarantine_clients SET day = day - 31")
        now = datetime.now(UTC)
        dry = run_maintenance(conn, settings, now=now, dry_run=True)
        assert {s.name: s.rows for s in dry.steps}["purge_quarantine"] == 2
        report = run_maintenance(conn, settings, now=now)
        assert {s.name: s.rows for s in report.steps}["purge_quarantine"] == 2
        assert conn.execute("SELECT id FROM mailroom.bounce_quarantine").fetchall() == [(3,)]
        assert conn.execute("SELECT count(*) FROM mailroom.bounce_quarantine_clients").fetchone() == (0,)
        # A shorter retention reaches the newer one too.
        shorter = replace(settings, quarantine_retention_days=1)
        run_maintenance(conn, shorter, now=now + timedelta(days=2))
        assert conn.execute("SELECT count(*) FROM mailroom.bounce_quarantine").fetchone() == (0,)
