"""DMARC aggregate reports through every door: `mailroom dmarc ingest`, the bounce receiver over SMTP, the
bounce mailbox over IMAP; stored once, only for our domains, refusals quarantined, read back and retained."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.cli import run
from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_KEY
from tests.producers.bounces.mail_servers import PASSWORD, USER, Store, serving
from tests.producers.bounces.receivers import Clock, send_report
from tests.producers.dmarc_helpers import (
    FIXTURES,
    GOOGLE_EMAIL,
    GOOGLE_ZIP,
    MICROSOFT_EMAIL,
    MICROSOFT_GZIP,
    RELAY,
    RFC_EXAMPLE,
    SPOOFER,
    add_sender,
    count,
    load,
    zeros_gzip,
)
from worker.core.config import Settings
from worker.ops.retention import run_maintenance
from worker.producers.bounces.mailbox import DatabaseIntake, Mailbox, poll
from worker.producers.bounces.receiver import BounceHandler, BounceServer, RateLimiter, database_processor


def test_the_rfc_example_google_zip_and_microsoft_gzip_emails_are_stored_through_the_cli(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url)
    for name in (RFC_EXAMPLE, GOOGLE_EMAIL, str(FIXTURES / MICROSOFT_EMAIL)):
        path = name if name.startswith("/") else str(FIXTURES / name)
        code, out, err = run(capsys, "dmarc", "ingest", path)
        assert (code, err) == (0, ""), err
        assert "stored" in out
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT org_name, domain, policy, percent, messages, arrived_by FROM mailroom.dmarc_reports ORDER BY id"
        ).fetchall()
        spoofed = conn.execute(
            "SELECT c.disposition, c.dkim_aligned, c.spf_aligned, c.auth_results FROM mailroom.dmarc_records c"
            " JOIN mailroom.dmarc_reports r ON r.id = c.report WHERE r.org_name = 'google.com' AND c.source_ip = %s",
            (SPOOFER,),
        ).fetchone()
    assert rows == [
        ("acme.com", "example.com", "none", 100, 2, "cli"),
        ("google.com", "example.com", "quarantine", 100, 1495, "cli"),
        ("outlook.com", "example.com", "quarantine", 100, 646, "cli"),
    ]
    assert spoofed == (
        "quarantine",
        False,
        False,
        {"dkim": [], "spf": [{"domain": "mail.spoofer.test", "result": "softfail", "scope": "mfrom"}]},
    )
    assert count(db_url, "dmarc_records") == 1 + 3 + 2


def test_the_same_report_again_in_another_wrapping_is_stored_once(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url)
    assert run(capsys, "dmarc", "ingest", str(FIXTURES / GOOGLE_EMAIL))[0] == 0
    code, out, _ = run(capsys, "dmarc", "ingest", str(FIXTURES / GOOGLE_ZIP))
    assert code == 0
    assert "seen before, unchanged" in out
    assert (count(db_url, "dmarc_reports"), count(db_url, "dmarc_records")) == (1, 3)


def test_a_report_for_a_domain_no_sender_uses_is_refused_and_nothing_stored(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url, "news@other.example")
    code, out, err = run(capsys, "dmarc", "ingest", str(FIXTURES / MICROSOFT_GZIP))
    assert (code, out) == (1, "")
    assert "report refused, nothing stored: the report is for example.com" in err
    assert count(db_url, "dmarc_reports") == 0


@pytest.mark.parametrize("policy", ["com", "co.uk"])
def test_a_report_for_a_public_suffix_or_naming_our_domain_only_in_a_record_is_refused(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path, policy: str
) -> None:
    # Our sending domains are public: a stranger's report for "com", whose records name our From
    # domain, must not be kept (it would let anyone fill the table, or squat a reporter's report id).
    add_sender(db_url, "news@example.co.uk" if policy == "co.uk" else "news@example.com")
    ours = "example.co.uk" if policy == "co.uk" else "example.com"
    forged = (
        load(RFC_EXAMPLE).decode().replace("<domain>example.com</domain>", f"<domain>{policy}</domain>", 1)
    )
    forged = forged.replace("<header_from>example.com</header_from>", f"<header_from>{ours}</header_from>")
    path = tmp_path / "forged.xml"
    path.write_text(forged)
    code, _, err = run(capsys, "dmarc", "ingest", str(path))
    assert code == 1 and f"the report is for {policy}" in err
    assert count(db_url, "dmarc_reports") == 0


def test_a_bomb_or_an_entity_through_the_cli_exits_1_and_stores_nothing(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_sender(db_url)
    bomb = tmp_path / "bomb.xml.gz"
    bomb.write_bytes(zeros_gzip(40 << 20))
    xxe = tmp_path / "xxe.xml"
    xxe.write_bytes(
        load(RFC_EXAMPLE).replace(
            b"?>", b'?><!DOCTYPE feedback [<!ENTITY x SYSTEM "file:///etc/passwd">]>', 1
        )
    )
    for path, reason in ((bomb, "gzip bomb"), (xxe, "DOCTYPE or ENTITY declaration is refused")):
        code, out, err = run(capsys, "dmarc", "ingest", str(path))
        assert (code, out) == (1, "")
        assert reason in err
    assert count(db_url, "dmarc_reports") == 0


def test_the_report_flags_the_source_failing_alignment_for_a_senders_domain(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url)
    for name in (GOOGLE_ZIP, MICROSOFT_GZIP):
        assert run(capsys, "dmarc", "ingest", str(FIXTURES / name))[0] == 0
    code, out, _ = run(capsys, "dmarc", "report", "--since", "2025-12-31", "--json")
    assert code == 0
    rows = {r["source"]: r for r in json.loads(out)}
    assert rows[SPOOFER] | {"last_seen": None} == {
        "domain": "example.com",
        "source": SPOOFER,
        "messages": 16,
        "passed": 0,
        "failed": 16,
        "dkim_aligned": 0,
        "spf_aligned": 0,
        "quarantined_or_rejected": 16,
        "reports": 2,
        "reporters": "google.com, outlook.com",
        "last_seen": None,
        "flagged": True,
        "disputed": 0,
    }
    assert (rows[RELAY]["messages"], rows[RELAY]["passed"], rows[RELAY]["flagged"]) == (2122, 2122, False)
    assert rows["2001:db8::25"]["dkim_aligned"] == 3 and not rows["2001:db8::25"]["flagged"]
    assert next(iter(rows)) == SPOOFER  # most failed first
    code, out, _ = run(capsys, "dmarc", "report", "--since", "2025-12-31", "--domain", "example.com")
    assert code == 0
    assert out.startswith("DMARC reports are unauthenticated claims: ")
    spoofer_line = next(line for line in out.splitlines() if SPOOFER in line)
    assert "FAILING" in spoofer_line
    assert "1 source(s) failing DMARC alignment" in out
    code, out, _ = run(capsys, "dmarc", "report", "--since", "2026-02-01")
    assert (code, out) == (0, "no DMARC report since 2026-02-01\n")


async def test_a_report_mailed_to_dmarc_at_the_bounce_domain_is_stored_and_a_refused_one_quarantined(
    db_url: str,
) -> None:
    add_sender(db_url)
    handler = BounceHandler(
        database_processor(db_url, FIXTURE_KEY), frozenset({BOUNCE_DOMAIN}), RateLimiter(600, 100, Clock())
    )
    server = BounceServer(handler, "127.0.0.1", 0)
    port = await server.start()
    try:
        to = f"dmarc@{BOUNCE_DOMAIN}"
        assert (await send_report(port, load(GOOGLE_EMAIL), to))[0] == 250
        assert (await send_report(port, load(GOOGLE_EMAIL), to))[0] == 250
        forged = load(MICROSOFT_EMAIL).replace(b"Delivered-To", b"X-Was")
        empty = forged.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"  # headers only: no report in it
        code, reply = await send_report(port, empty, to)
        assert (code, reply) == (250, "2.0.0 OK: message accepted")  # the same neutral reply
    finally:
        await server.close()
    assert handler.outcomes == ["recorded", "duplicate", "quarantined"]
    assert (count(db_url, "dmarc_reports"), count(db_url, "bounce_quarantine")) == (1, 1)
    with psycopg.connect(db_url) as conn:
        reason = conn.execute("SELECT reason FROM mailroom.bounce_quarantine").fetchone()
        arrived = conn.execute("SELECT arrived_by FROM mailroom.dmarc_reports").fetchone()
    assert reason is not None and reason[0].startswith("DMARC report refused: ")
    assert arrived == ("receiver",)


def test_the_bounce_mailbox_takes_in_reports_sent_to_dmarc_and_deletes_them(db_url: str) -> None:
    add_sender(db_url)
    store = Store()
    store.deliver(load(GOOGLE_EMAIL))
    store.deliver(load(MICROSOFT_EMAIL))
    with serving("imap", store) as port:
        mailbox = Mailbox("imap", "127.0.0.1", USER, PASSWORD, port=port, security="none", timeout=10.0)
        with DatabaseIntake(db_url, FIXTURE_KEY) as intake:
            result = poll(mailbox, intake)
    assert (result.fetched, result.deleted, result.verdicts) == (2, 2, {"recorded": 2})
    assert store.raws() == []
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT org_name, arrived_by FROM mailroom.dmarc_reports ORDER BY org_name"
        ).fetchall()
    assert rows == [("google.com", "mailbox"), ("outlook.com", "mailbox")]


def test_maintenance_deletes_reports_past_their_retention_with_their_records(
    db_url: str, settings: Settings, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url)
    for name in (GOOGLE_ZIP, MICROSOFT_GZIP):
        assert run(capsys, "dmarc", "ingest", str(FIXTURES / name))[0] == 0
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE mailroom.dmarc_reports SET received_at = now() - interval '401 days' WHERE org_name = 'google.com'"
        )
        now = datetime.now(UTC) + timedelta(minutes=1)
        dry = run_maintenance(conn, settings, now=now, dry_run=True)
        assert {s.name: s.rows for s in dry.steps}["purge_dmarc_reports"] == 1
        assert count(db_url, "dmarc_reports") == 2
        done = run_maintenance(conn, settings, now=now)
    assert {s.name: s.rows for s in done.steps}["purge_dmarc_reports"] == 1
    assert (count(db_url, "dmarc_reports"), count(db_url, "dmarc_records")) == (1, 2)
