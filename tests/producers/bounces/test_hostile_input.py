"""Hostile messages through every bounce door (intake, `bounces ingest`, SMTP): each ends recorded or
quarantined, never raises, never a 451 or exit 75, and the parser's work stays within its budget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiosmtplib
import psycopg
import pytest

from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_KEY, sent_email
from tests.producers.bounces.pathological import HOSTILE_FIELDS, SHAPES, dashes_base64, dsn
from worker.cli.main import main
from worker.core.return_path import derive_key, return_path
from worker.producers.bounces import ingest
from worker.producers.bounces.parse import OVER_BUDGET
from worker.producers.bounces.receiver import BounceHandler, BounceServer, RateLimiter, database_processor

UNKNOWN = "no-such-user@mta.example.net"
MIB = 1 << 20
# Shapes whose structure alone is over the parser's budget at any size in the corpus.
OVER = {"nested_mime", "many_parts", "nested_messages", "many_recipients", "many_status_blocks"}


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection: `ingest` commits each message in its own transaction."""
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def _ended(conn: psycopg.Connection[Any]) -> tuple[int, int, list[str]]:
    """(bounce events, quarantined messages, their reasons)."""
    events = conn.execute("SELECT count(*) FROM mailroom.bounce_events").fetchone()
    reasons = [r[0] for r in conn.execute("SELECT reason FROM mailroom.bounce_quarantine ORDER BY id")]
    assert events is not None
    return int(events[0]), len(reasons), reasons


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_hostile_shape_of_a_mebibyte_ends_in_the_quarantine_through_ingest(
    shape: str, auto: psycopg.Connection[Any]
) -> None:
    raw = SHAPES[shape](MIB)
    outcome = ingest(auto, raw, FIXTURE_KEY, ["bounces@bounces.example"], client="192.0.2.1")
    assert outcome.verdict == "quarantined", outcome.detail
    _events, kept, (reason,) = _ended(auto)
    assert kept == 1
    if shape in OVER:
        assert reason.startswith(OVER_BUDGET), reason
    row = auto.execute("SELECT client, length(raw), raw_size FROM mailroom.bounce_quarantine").fetchone()
    assert row is not None and row[0] == "192.0.2.1" and row[1] <= 64 * 1024 and row[2] == len(raw)


def test_forty_thousand_dashes_in_base64_are_read_and_quarantined(auto: psycopg.Connection[Any]) -> None:
    # The finding: 60 s in one regular expression for these 54 KB; a megabyte (above) took hours.
    outcome = ingest(auto, dashes_base64(40_000), FIXTURE_KEY)
    assert outcome.verdict == "quarantined" and "naming no failed address" in outcome.detail


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_hostile_shape_through_bounces_ingest_exits_0_and_is_quarantined(
    shape: str, cli_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hostile.eml"
    path.write_bytes(SHAPES[shape](MIB))
    assert main(["bounces", "ingest", str(path)]) == 0
    assert capsys.readouterr().out.startswith("bounces: quarantined")
    with psycopg.connect(cli_env["MAILROOM_DATABASE_URL"]) as conn:
        row = conn.execute("SELECT client FROM mailroom.bounce_quarantine").fetchone()
    assert row == ("pipe",)


def _hostile_dsn(db_url: str, key: bytes, field: str) -> tuple[int, bytes]:
    email = sent_email(db_url, UNKNOWN)
    address = return_path(email["id"], UNKNOWN, BOUNCE_DOMAIN, "bounces", key)
    return email["id"], dsn(address, **HOSTILE_FIELDS[field])


@pytest.mark.parametrize("field", sorted(HOSTILE_FIELDS))
def test_a_dsn_with_nul_bad_bytes_or_giant_fields_is_stored_cleaned_never_failed(
    field: str, db_url: str, auto: psycopg.Connection[Any]
) -> None:
    email_id, raw = _hostile_dsn(db_url, FIXTURE_KEY, field)
    outcome = ingest(auto, raw, FIXTURE_KEY)
    assert outcome.verdict in ("recorded", "quarantined"), outcome.detail
    events, kept, _reasons = _ended(auto)
    assert events + kept == 1
    for row in auto.execute(
        "SELECT recipient, status, action, coalesce(diagnostic, ''), coalesce(source_message_id, '')"
        " FROM mailroom.bounce_events"
    ):
        assert all("\x00" not in value and len(value) <= 1000 for value in row)
    if field in ("nul_in_diagnostic", "nul_in_message_id", "invalid_utf8_in_diagnostic", "giant_diagnostic"):
        assert outcome.verdict == "recorded", outcome.detail
        status = auto.execute("SELECT status FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
        assert status == ("bounced",)


def test_a_nul_in_the_diagnostic_is_kept_as_a_replacement_character(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    _email_id, raw = _hostile_dsn(db_url, FIXTURE_KEY, "nul_in_diagnostic")
    assert ingest(auto, raw, FIXTURE_KEY).verdict == "recorded"
    row = auto.execute("SELECT diagnostic FROM mailroom.bounce_events").fetchone()
    assert row == ("smtp; 550 5.1.1 unknown\ufffduser",)


@pytest.mark.parametrize("field", ["nul_in_diagnostic", "nul_in_message_id", "surrogate_word_in_diagnostic"])
def test_bounces_ingest_of_a_dsn_with_a_nul_exits_0_not_75(
    field: str,
    db_url: str,
    cli_env: dict[str, str],
    secret_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _email_id, raw = _hostile_dsn(db_url, derive_key(secret_key), field)
    path = tmp_path / "dsn.eml"
    path.write_bytes(raw)
    assert main(["bounces", "ingest", str(path)]) == 0
    assert capsys.readouterr().out.startswith("bounces: recorded")


async def test_the_receiver_takes_a_nul_dsn_and_a_mebibyte_of_dashes_with_250(db_url: str) -> None:
    handler = BounceHandler(
        database_processor(db_url, FIXTURE_KEY), frozenset({BOUNCE_DOMAIN}), RateLimiter(600, 100)
    )
    server = BounceServer(handler, "127.0.0.1", 0, max_bytes=4 * MIB)
    port = await server.start()
    try:
        _email_id, nul = _hostile_dsn(db_url, FIXTURE_KEY, "nul_in_diagnostic")
        for raw in (nul, dashes_base64(MIB)):
            async with aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=60) as smtp:
                # A 451 (or any refusal of the DATA) raises here: the MTA would retry it for days.
                errors, _reply = await smtp.sendmail(
                    "MAILER-DAEMON@mta.example.net", [f"bounces@{BOUNCE_DOMAIN}"], raw
                )
            assert errors == {}
    finally:
        await server.close()
    with psycopg.connect(db_url) as conn:
        events, kept, _reasons = _ended(conn)
        client = conn.execute("SELECT client FROM mailroom.bounce_quarantine").fetchone()
    assert (events, kept) == (1, 1)
    assert client == ("127.0.0.1",)  # the quarantine's per-client limit counts the SMTP peer
