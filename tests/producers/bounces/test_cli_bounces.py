"""`mailroom bounces ingest|receive|quarantine`, run in-process against the test database."""

from __future__ import annotations

import io
import json
from pathlib import Path

import psycopg
import pytest

from tests.producers.bounces.corpus import BOUNCE_DOMAIN, load, readdress, sent_email
from worker.cli.main import main
from worker.core.return_path import derive_key, return_path

UNKNOWN = "no-such-user@mta.example.net"


def _status(db_url: str, email_id: int) -> str:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT status FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_ingest_of_a_file_records_the_bounce_and_exits_0(
    db_url: str, cli_env: dict[str, str], secret_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    email = sent_email(db_url, UNKNOWN)
    path = tmp_path / "dsn.eml"
    path.write_bytes(
        readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, derive_key(secret_key))
    )
    assert main(["bounces", "ingest", str(path)]) == 0
    assert "recorded" in capsys.readouterr().out
    assert _status(db_url, email["id"]) == "bounced"
    assert main(["bounces", "ingest", str(path)]) == 0
    assert "duplicate" in capsys.readouterr().out


def test_ingest_from_a_pipe_takes_the_envelope_recipient_the_mta_sets(
    db_url: str,
    cli_env: dict[str, str],
    secret_key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    email = sent_email(db_url, "gone@example.net")
    raw = load("exim-plain.eml").replace(b"bounces+TOKEN@bounces.example", b"bounces@bounces.example")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(raw)))
    monkeypatch.setenv(
        "ORIGINAL_RECIPIENT",
        return_path(email["id"], "gone@example.net", BOUNCE_DOMAIN, "bounces", derive_key(secret_key)),
    )
    assert main(["bounces", "ingest"]) == 0
    assert "recorded" in capsys.readouterr().out
    assert _status(db_url, email["id"]) == "bounced"


def test_junk_is_quarantined_with_exit_0_and_listed(
    cli_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "junk.eml"
    path.write_bytes(b"Subject: buy now\n\nnothing to do with bounces\n")
    assert main(["bounces", "ingest", "--envelope-recipient", "bounces@bounces.example", str(path)]) == 0
    assert "quarantined" in capsys.readouterr().out
    assert main(["bounces", "quarantine", "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert item["size"] == path.stat().st_size
    assert item["envelope_recipient"] == "bou***@bounces.example"
    assert "not a delivery report" in item["reason"]
    assert main(["bounces", "quarantine"]) == 0
    assert "not a delivery report" in capsys.readouterr().out


def test_quarantine_show_writes_the_kept_bytes(
    cli_env: dict[str, str], tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "big.eml"
    path.write_bytes(b"Subject: x\n\n" + b"y" * 5000)
    assert main(["bounces", "ingest", "--max-bytes", "1000", str(path)]) == 0
    assert b"larger than --max-bytes 1000" in capsysbinary.readouterr().out
    assert main(["bounces", "quarantine", "--show", "1"]) == 0
    assert capsysbinary.readouterr().out == path.read_bytes()[:1001]
    assert main(["bounces", "quarantine", "--show", "2"]) == 1


def test_ingest_exits_75_when_the_database_cannot_be_reached_so_the_mta_retries(
    cli_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MAILROOM_DATABASE_URL", "postgresql://127.0.0.1:1/nothing?connect_timeout=2")
    path = tmp_path / "dsn.eml"
    path.write_bytes(load("postfix-unknown-user.eml"))
    assert main(["bounces", "ingest", str(path)]) == 75
    assert "try again later" in capsys.readouterr().err


def test_ingest_of_a_missing_file_is_a_usage_error(cli_env: dict[str, str], tmp_path: Path) -> None:
    assert main(["bounces", "ingest", str(tmp_path / "missing.eml")]) == 2


def test_receive_without_a_bounce_domain_is_a_usage_error(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MAILROOM_BOUNCE_DOMAIN", raising=False)
    assert main(["bounces", "receive", "--listen", "127.0.0.1:0"]) == 2
    assert "MAILROOM_BOUNCE_DOMAIN" in capsys.readouterr().err


def test_receive_help_explains_the_relay_refusal_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bounces", "receive", "--help"]) == 0
    text = capsys.readouterr().out
    assert "550 5.7.1 relay denied" in text and "Exit status" in text and "Examples" in text
