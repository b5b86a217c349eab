"""A report the database refuses (what it says, not the database being down): kept in the quarantine,
answered as taken (250, exit 0), never retried by the sending MTA for days."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_KEY, load, readdress, sent_email
from tests.producers.bounces.receivers import ReceiverFactory, send_report
from worker.cli.main import main
from worker.core.return_path import derive_key, return_path

UNKNOWN = "no-such-user@mta.example.net"


def _refuse_every_bounce_event(db_url: str) -> None:
    """A rule of the database that refuses what a report says, as a check constraint would."""
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "CREATE FUNCTION refuse_report() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON mailroom.bounce_events"
            " FOR EACH ROW EXECUTE FUNCTION refuse_report()"
        )


def test_a_report_the_database_refuses_is_quarantined_with_exit_0_not_retried_for_days(
    db_url: str, cli_env: dict[str, str], secret_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    email = sent_email(db_url, UNKNOWN)
    _refuse_every_bounce_event(db_url)
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


async def test_the_receiver_answers_250_to_a_report_the_database_refuses_and_keeps_it(
    db_url: str, receiver: ReceiverFactory
) -> None:
    email = sent_email(db_url, UNKNOWN)
    _refuse_every_bounce_event(db_url)
    raw = readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY)
    to = return_path(email["id"], UNKNOWN, BOUNCE_DOMAIN, "bounces", FIXTURE_KEY)
    server = await receiver(bounce_domain=BOUNCE_DOMAIN)
    code, reply = await send_report(server.port, raw, to)
    assert code == 250 and reply.startswith("2.0.0")  # not a 451 the sending MTA would retry for days
    with psycopg.connect(db_url) as conn:
        kept = conn.execute("SELECT reason, client FROM mailroom.bounce_quarantine").fetchall()
    assert kept == [("refused by the database: CheckViolation", "127.0.0.1")]
