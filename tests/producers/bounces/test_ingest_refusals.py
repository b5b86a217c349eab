"""`mailroom bounces ingest` when the database refuses what a message says: kept, exit 0, never 75."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.producers.bounces.corpus import load, readdress, sent_email
from worker.cli.main import main
from worker.core.return_path import derive_key

UNKNOWN = "no-such-user@mta.example.net"


def test_a_report_the_database_refuses_is_quarantined_with_exit_0_not_retried_for_days(
    db_url: str, cli_env: dict[str, str], secret_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    email = sent_email(db_url, UNKNOWN)
    with psycopg.connect(db_url) as conn:
        # A rule of the database that refuses this report's content, as a check constraint would.
        conn.execute(
            "CREATE FUNCTION refuse_report() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON mailroom.bounce_events"
            " FOR EACH ROW EXECUTE FUNCTION refuse_report()"
        )
    path = tmp_path / "dsn.eml"
    path.write_bytes(
        readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, derive_key(secret_key))
    )
    assert main(["bounces", "ingest", str(path)]) == 0
    assert "quarantined: refused by the database: CheckViolation" in capsys.readouterr().out
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT reason, client FROM mailroom.bounce_quarantine").fetchall() == [
            ("refused by the database: CheckViolation", "pipe")
        ]
        status = conn.execute(
            "SELECT status FROM mailroom.email_queue WHERE id = %s", (email["id"],)
        ).fetchone()
    assert status == ("sent",)
