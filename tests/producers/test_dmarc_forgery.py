"""Forged DMARC reports about our own (public) From domain, played through the bounce receiver over SMTP
and `mailroom dmarc ingest`: bounded per reporting organisation and in all, with health warning; a
genuine report whose id a forger took first disputes it instead of being dropped as seen before; and
`mailroom dmarc report` says the reports are unauthenticated claims."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from textual.widgets import DataTable

from console.app import MailroomConsole
from console.wiring import ProducerActions
from tests.cli import run
from tests.console.helpers import WAIT, open_screen
from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_KEY
from tests.producers.bounces.receivers import Clock, send_report
from tests.producers.dmarc_helpers import (
    FIXTURES,
    GOOGLE_EMAIL,
    GOOGLE_ZIP,
    SPOOFER,
    add_sender,
    big_report,
    count,
    load,
    mailed,
)
from worker.core.config import Settings
from worker.ops.health import check_health
from worker.producers.bounces.receiver import (
    ACCEPTED,
    BounceHandler,
    BounceServer,
    RateLimiter,
    database_processor,
)

DMARC = f"dmarc@{BOUNCE_DOMAIN}"
NEUTRAL = (250, ACCEPTED.removeprefix("250 "))
GOOGLE_ID = "17352930117461537396"  # the id of Google's report in tests/fixtures/dmarc
TRILLION = 10**12


@pytest.fixture
async def receiver(db_url: str) -> AsyncIterator[tuple[int, BounceHandler]]:
    """A bounce receiver on a free port: its port and its handler (whose outcomes the tests read)."""
    handler = BounceHandler(
        database_processor(db_url, FIXTURE_KEY), frozenset({BOUNCE_DOMAIN}), RateLimiter(600, 100, Clock())
    )
    server = BounceServer(handler, "127.0.0.1", 0)
    port = await server.start()
    yield port, handler
    await server.close()


def warnings(db_url: str) -> dict[str, str]:
    """What health warns of, by kind."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        report = check_health(conn, Settings.from_env())
    return {f.kind: f.text for f in report.findings}


def quarantine_reasons(db_url: str) -> list[str]:
    with psycopg.connect(db_url) as conn:
        return [r[0] for r in conn.execute("SELECT reason FROM mailroom.bounce_quarantine ORDER BY id")]


async def test_forged_reports_in_googles_name_are_bounded_per_organisation_a_day_and_health_warns(
    db_url: str, receiver: tuple[int, BounceHandler], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAILROOM_DMARC_ORG_DAILY_MAX", "3")
    add_sender(db_url)
    port, handler = receiver
    for i in range(5):  # a source failing at a trillion messages, "from google.com", five times over
        forged = big_report(2, org="google.com", report_id=f"forged-{i}", messages=TRILLION)
        assert await send_report(port, mailed(forged, f"forged-{i}"), DMARC) == NEUTRAL
    other = big_report(2, org="yahoo.com", report_id="y1")
    assert await send_report(port, mailed(other, "y1"), DMARC) == NEUTRAL
    # A stored report sent again is seen before, past the bound or not.
    again = big_report(2, org="google.com", report_id="forged-0", messages=TRILLION)
    assert await send_report(port, mailed(again, "forged-0"), DMARC) == NEUTRAL
    assert handler.outcomes == ["recorded"] * 3 + ["quarantined"] * 2 + ["recorded", "duplicate"]
    with psycopg.connect(db_url) as conn:
        stored = conn.execute(
            "SELECT org_name, count(*) FROM mailroom.dmarc_reports GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert stored == [("google.com", 3), ("yahoo.com", 1)]
    reasons = quarantine_reasons(db_url)
    assert len(reasons) == 2
    assert all("google.com already has 3 reports stored today (UTC), its daily bound" in r for r in reasons)
    assert warnings(db_url)["dmarc_refused"].startswith(
        "2 DMARC reports were refused today (UTC): 2 past their organisation's daily bound"
    )


def test_reports_past_the_bound_in_all_are_refused_and_health_warns_as_it_fills(
    db_url: str,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MAILROOM_DMARC_MAX_RECORDS", "10")
    add_sender(db_url)
    codes = []
    for org in ("a.example", "b.example", "c.example"):
        path = tmp_path / f"{org}.xml"
        path.write_bytes(big_report(4, org=org, report_id=org, distinct=True))
        code, _, err = run(capsys, "dmarc", "ingest", str(path))
        codes.append(code)
    assert codes == [0, 0, 1]
    assert (
        "the stored reports hold 8 records; 4 more would pass the bound of 10 (MAILROOM_DMARC_MAX_RECORDS)"
        in err
    )
    assert (count(db_url, "dmarc_reports"), count(db_url, "dmarc_records")) == (2, 8)
    found = warnings(db_url)
    assert found["dmarc_full"].startswith("the DMARC reports hold 8 records, 80% of their bound")
    assert "1 DMARC reports were refused today (UTC): 0 past" in found["dmarc_refused"]
    assert "1 with the reports full" in found["dmarc_refused"]


async def test_a_genuine_report_whose_id_a_forger_took_first_disputes_it_and_the_report_says_so(
    db_url: str,
    receiver: tuple[int, BounceHandler],
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    add_sender(db_url)
    port, handler = receiver
    forged = mailed(big_report(1, org="google.com", report_id=GOOGLE_ID, messages=TRILLION), GOOGLE_ID)
    assert await send_report(port, forged, DMARC) == NEUTRAL
    assert await send_report(port, load(GOOGLE_EMAIL), DMARC) == NEUTRAL  # the genuine one, later
    assert await send_report(port, forged, DMARC) == NEUTRAL  # the forgery again: the same content
    assert handler.outcomes == ["recorded", "quarantined", "duplicate"]
    (reason,) = quarantine_reasons(db_url)
    assert reason == (
        f"DMARC report refused: a report {GOOGLE_ID} from google.com was stored before with other content: "
        "this one is not stored, and the stored one is now marked disputed (reports are unauthenticated: "
        "one of the two is not what it claims)"
    )
    with psycopg.connect(db_url) as conn:
        disputes = conn.execute("SELECT messages, disputes FROM mailroom.dmarc_reports").fetchall()
    assert disputes == [(TRILLION, 1)]
    code, out, _ = run(capsys, "dmarc", "report", "--since", "2025-12-31")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(
        "DMARC reports are unauthenticated claims: anyone can mail one in any reporter's name"
    )
    spoofer = next(line for line in lines if SPOOFER in line)
    assert "FAILING DISPUTED" in spoofer and f"{TRILLION:,}" in spoofer
    assert lines[-1] == "1 source(s) from disputed reports: another report claimed their organisation and id"
    code, out, _ = run(capsys, "dmarc", "report", "--since", "2025-12-31", "--json")
    assert [(r["source"], r["disputed"]) for r in json.loads(out)] == [(SPOOFER, 1)]
    assert warnings(db_url)["dmarc_disputed"].startswith(
        "1 DMARC reports today came with the organisation and id of a stored report but other content"
    )


async def test_the_console_says_the_reports_are_claims_and_marks_the_source_of_a_disputed_one(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_sender(db_url)
    forged = tmp_path / "forged.xml"
    forged.write_bytes(big_report(1, org="google.com", report_id=GOOGLE_ID, messages=TRILLION))
    assert run(capsys, "dmarc", "ingest", str(forged))[0] == 0
    code, _, err = run(capsys, "dmarc", "ingest", str(FIXTURES / GOOGLE_ZIP))  # the genuine one, later
    assert code == 1 and "was stored before with other content" in err
    app = MailroomConsole(
        db_url, Settings.from_env(), ProducerActions(), clock=lambda: datetime(2026, 1, 20, tzinfo=UTC)
    )
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(app, pilot, "d")
        table = app.screen.query_one("#dmarc", DataTable)
        assert await app.wait_until_shown(lambda: table.row_count == 1, WAIT)
        title = str(table.border_title)
        cells = [str(cell) for cell in table.get_row_at(0)]
    assert title.startswith("DMARC reports (unauthenticated claims), last 30 days: 1 sources, 1 failing")
    assert cells[1] == SPOOFER and cells[7] == "FAILING DISPUTED"
