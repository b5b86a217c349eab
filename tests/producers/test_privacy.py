"""Privacy: export everything about an address; erase it everywhere while counts, timestamps and statuses stay."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.producers.helpers import archived_ids, placed, sent_email
from tests.worker.helpers import add_sender, run_until_drained
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.devtools.sink import RunningSink
from worker.ops.archive_files import archive_directory, read_archive
from worker.ops.privacy import erase_address, export_address
from worker.ops.retention import run_maintenance
from worker.producers.inbox import ingest_event

ADA = "ada@example.com"
BOB = "bob@example.com"

# Rows per table that hold something of Ada's or Bob's; erasure must keep every count.
COUNTED = (
    "email_queue",
    "send_logs",
    "open_events",
    "click_events",
    "tracked_links",
    "unsubscribe_list",
    "bounce_list",
    "inbox",
    "expected_signers",
    "signatures",
    "reminder_logs",
    "accounts",
    "people",
)


def table_counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    conn.commit()
    query = sql.SQL("SELECT count(*) AS n FROM {}")
    return {t: conn.execute(query.format(sql.Identifier("mailroom", t))).fetchone()["n"] for t in COUNTED}  # type: ignore[index]


def queue_state(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT id, status, created_at, sent_at, retry_count FROM mailroom.email_queue ORDER BY id"
    )
    return [tuple(r.values()) for r in rows.fetchall()]


def text_of_everything(conn: psycopg.Connection[Any]) -> str:
    """Every row of every counted table as text, to search for the address."""
    return "\n".join(
        str(r)
        for t in COUNTED
        for r in conn.execute(
            sql.SQL("SELECT t::text FROM {} t").format(sql.Identifier("mailroom", t))
        ).fetchall()
    )


@pytest.fixture
async def history(db_url: str, settings: Settings, smtp_sink: RunningSink) -> dict[str, Any]:
    """Ada and Bob, each with mail delivered and bounced, events, lists, documents, accounts and an archive."""
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        for who in (ADA, BOB):
            enqueue(
                conn, EmailRequest(to=who, to_name="Someone", subject="Welcome", text="Hi"), settings=settings
            )
        conn.commit()
    await run_until_drained(db_url, settings)
    with psycopg.connect(db_url) as conn:
        # Sent long before the bounce: once Ada is on the bounce list, email to her is stored suppressed.
        old_ada = sent_email(conn, settings, datetime.now(UTC) - timedelta(days=200), to=ADA)
        sent_email(conn, settings, datetime.now(UTC) - timedelta(days=200), to=BOB)
    smtp_sink.on_rcpt(ADA, f"550 5.1.1 <{ADA}>: user unknown")
    with psycopg.connect(db_url) as conn:
        enqueue(conn, EmailRequest(to=ADA.upper(), subject="Bounce", text="x"), settings=settings)
        conn.commit()
    await run_until_drained(db_url, settings)
    with psycopg.connect(db_url) as conn:
        ingest_event(conn, "m-ada", "shop", "order_placed", placed(ADA), settings=settings)
        ingest_event(
            conn, "m-bob", "shop", "order_placed", placed(BOB, customer_name="Bob"), settings=settings
        )
        first = conn.execute(
            "SELECT id FROM mailroom.email_queue WHERE recipient_email = %s AND subject = 'Welcome'", (ADA,)
        )
        ada_email = first.fetchone()[0]  # type: ignore[index]
        conn.execute(
            "INSERT INTO mailroom.tracked_links (email_id, position, url) VALUES (%s, 0, 'https://example.com/x')",
            (ada_email,),
        )
        conn.execute(
            "INSERT INTO mailroom.open_events (email_id, ip_address, user_agent) VALUES (%s, '192.0.2.7', 'Ada-Mail/1')",
            (ada_email,),
        )
        conn.execute(
            "INSERT INTO mailroom.click_events (email_id, link_token, url, ip_address, user_agent)"
            " SELECT email_id, token, url, '192.0.2.7', 'Ada-Mail/1' FROM mailroom.tracked_links",
        )
        conn.execute(
            "INSERT INTO mailroom.unsubscribe_list (email, source, ip_address, user_agent)"
            " VALUES (%s, 'link', '192.0.2.7', 'Ada-Mail/1'), (%s, 'link', NULL, NULL)",
            (ADA, BOB),
        )
        for doc in ("handbook", "policy"):
            conn.execute("INSERT INTO mailroom.documents (doc_id, title) VALUES (%s, %s)", (doc, doc.title()))
            conn.execute(
                "INSERT INTO mailroom.expected_signers (doc_id, email, name) VALUES (%s, %s, 'Ada'), (%s, %s, 'Bob')",
                (doc, ADA, doc, BOB),
            )
        conn.execute(
            "INSERT INTO mailroom.signatures (doc_id, signer_email, signer_name, signed_at, nonce, payload,"
            " payload_hash, signature) VALUES ('handbook', %s, 'Ada', now(), 'n0123456789abcdef', %s, %s, 'c2ln')",
            (ADA, json.dumps({"signer": ADA}), "a" * 64),
        )
        conn.execute(
            "INSERT INTO mailroom.reminder_logs (doc_id, recipient_email, template) VALUES ('policy', %s, 'reminder'),"
            " ('policy', %s, 'reminder')",
            (ADA, BOB),
        )
        conn.execute(
            "INSERT INTO mailroom.accounts (email, login, status) VALUES (%s, 'ada', 'active'), (%s, 'bob', 'active')",
            (ADA, BOB),
        )
        conn.execute(
            "INSERT INTO mailroom.people (email, first_name, last_name, date_of_birth, time_zone)"
            " VALUES (%s, 'Ada', 'Lovelace', '1985-12-10', 'Europe/London')",
            (ADA,),
        )
        conn.commit()
    with psycopg.connect(db_url, autocommit=True) as conn:
        run_maintenance(conn, settings)
    return {"old_ada": old_ada, "ada_email": ada_email}


def test_export_holds_everything_about_the_address_and_nothing_else(
    conn: psycopg.Connection[Any], settings: Settings, history: dict[str, Any]
) -> None:
    data = export_address(conn, "  Ada@Example.com ", archive_directory(settings))
    assert data["address"] == ADA
    assert sorted(e["subject"] for e in data["emails"]) == [
        "Bounce",
        "Welcome",
        "Your order A-1001 is confirmed",
    ]
    assert [(s["outcome"], s["smtp_code"]) for s in data["send_logs"]] == [("sent", 250), ("bounced", 550)]
    assert len(data["open_events"]) == len(data["click_events"]) == len(data["tracked_links"]) == 1
    assert [u["email"] for u in data["unsubscribe_list"]] == [ADA]
    assert [b["email"] for b in data["bounce_list"]] == [ADA]
    assert [i["message_id"] for i in data["inbox"]] == ["m-ada"]
    assert sorted(e["doc_id"] for e in data["expected_signers"]) == ["handbook", "policy"]
    assert [s["doc_id"] for s in data["signatures"]] == ["handbook"]
    assert (
        len(data["reminder_logs"]) == len(data["accounts"]) == len(data["people"]) == len(data["events"]) == 1
    )
    assert [a["id"] for a in data["archived_emails"]] == [history["old_ada"]]
    assert BOB not in json.dumps(data, default=str)


def test_erase_anonymises_everywhere_and_keeps_counts_timestamps_and_statuses(
    conn: psycopg.Connection[Any], settings: Settings, history: dict[str, Any]
) -> None:
    directory = archive_directory(settings)
    counts, state = table_counts(conn), queue_state(conn)
    archived_before = sorted(archived_ids(directory))
    report = erase_address(conn, ADA, archive_dir=directory)
    conn.commit()
    # Nothing pending to cancel: Ada's order confirmation came after her bounce and was stored suppressed.
    assert report.replacement.endswith("@erased.invalid") and report.cancelled == 0
    assert report.kept_signatures == 1 and report.archive_files and report.rows["archived_emails"] == 1
    assert table_counts(conn) == counts
    after = queue_state(conn)
    assert [r[0] for r in after] == [r[0] for r in state]
    changed = [(b[1], a[1]) for b, a in zip(state, after, strict=True) if b != a]
    assert changed == []  # nothing moved (the order email, suppressed at enqueue, stays suppressed)
    assert ("suppressed",) in [r[1:2] for r in after]
    assert sorted(archived_ids(directory)) == archived_before
    # Ada is gone from every table but the signature she gave (and that document's signer row).
    data = export_address(conn, ADA, directory)
    assert [s["doc_id"] for s in data["signatures"]] == ["handbook"]
    assert [e["doc_id"] for e in data["expected_signers"]] == ["handbook"]
    leftovers = {k: v for k, v in data.items() if isinstance(v, list) and v}
    assert set(leftovers) == {"signatures", "expected_signers"}
    everything = text_of_everything(conn).lower()
    assert everything.count(ADA) == everything.count(f"{ADA}") == 3  # signature row (x2) and its signer
    assert "192.0.2.7" not in everything and "ada-mail" not in everything and "lovelace" not in everything
    for path in directory.glob("emails-*.jsonl.gz"):
        assert all(ADA not in line.lower() for _, line in read_archive(path))
    # Bob keeps everything, and Ada is on no list.
    bob = export_address(conn, BOB, directory)
    assert len(bob["emails"]) == 2 and len(bob["archived_emails"]) == 1 and bob["unsubscribe_list"]
    assert not conn.execute("SELECT 1 FROM mailroom.unsubscribe_list WHERE email = %s", (ADA,)).fetchall()
    erased = export_address(conn, report.replacement, directory)
    assert (
        len(erased["emails"]) == 3 and len(erased["send_logs"]) == 2 and len(erased["archived_emails"]) == 1
    )
    assert {e["subject"] for e in erased["emails"]} == {"[erased]"}
    assert all(report.replacement in s["response"] for s in erased["send_logs"] if s["outcome"] == "bounced")
    assert erased["bounce_list"] and erased["unsubscribe_list"][0]["ip_address"] is None


def test_erase_with_suppress_keeps_the_address_on_the_unsubscribe_list(
    conn: psycopg.Connection[Any], settings: Settings, history: dict[str, Any]
) -> None:
    conn.execute("DELETE FROM mailroom.unsubscribe_list")
    conn.commit()
    erase_address(conn, ADA, suppress=True, archive_dir=archive_directory(settings))
    conn.commit()
    row = conn.execute("SELECT email, source FROM mailroom.unsubscribe_list").fetchall()
    assert row == [{"email": ADA, "source": "privacy"}]


def test_privacy_cli_export_erase_round_trip(
    cli_env: dict[str, str],
    settings: Settings,
    history: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from worker.cli.main import main

    out_file = tmp_path / "ada.json"
    assert main(["privacy", "export", ADA, "--output", str(out_file)]) == 0
    assert "privacy: searched 1/1 archive files" in capsys.readouterr().err
    exported = json.loads(out_file.read_text(encoding="utf-8"))
    assert len(exported["emails"]) == 3 and oct(out_file.stat().st_mode & 0o777) == "0o600"
    capsys.readouterr()
    assert main(["privacy", "erase", ADA]) == 2
    assert "add --yes" in capsys.readouterr().err
    assert main(["privacy", "erase", ADA, "--yes", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"]["email_queue"] == 3 and report["kept_signatures"] == 1
    assert main(["privacy", "export", ADA]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["emails"] == [] and again["archived_emails"] == [] and again["send_logs"] == []
    assert main(["privacy", "export", "not-an-address"]) == 2


def test_erase_keeps_signatures_verifiable_and_exported_and_stops_reminders_to_the_erased_signer(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    from worker.producers.documents.signatures import (
        add_document,
        expect_signer,
        send_reminders,
        sign_document,
        verify_chain,
    )

    directory = archive_directory(settings)
    for doc in ("handbook", "policy"):
        add_document(conn, doc, title=doc.title())
        for who, name in ((ADA, "Ada"), (BOB, "Bob")):
            expect_signer(conn, doc, who, name=name, settings=settings)
        conn.commit()
    for who in (ADA, BOB):
        sign_document(conn, "handbook", who, settings=settings)
        conn.commit()
    report = erase_address(conn, ADA, archive_dir=directory)
    conn.commit()
    assert report.kept_signatures == 1
    # Signed evidence is untouched: every signature and link still verifies, and export still shows it.
    chain = verify_chain(conn, "handbook", settings=settings)
    assert chain.ok and chain.checked == 2, chain.summary()
    [signature] = export_address(conn, ADA, directory)["signatures"]
    assert signature["doc_id"] == "handbook" and json.loads(signature["payload"])["signer"] == ADA
    # Ada had not signed the policy: her signer row is anonymised, and a reminder run mails only Bob.
    result = send_reminders(conn, "policy", settings=settings)
    conn.commit()
    assert result.queued == 1
    assert list(result.skipped.values()) == ["the address was erased by a privacy request"]
    queued = conn.execute("SELECT recipient_email FROM mailroom.email_queue").fetchall()
    assert queued == [{"recipient_email": BOB}]


def test_erase_is_refused_with_nothing_changed_while_an_email_to_the_address_is_being_sent(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    from worker.ops.privacy import ErasureInFlight

    waiting, sending = (
        enqueue(conn, EmailRequest(to=ADA, subject=s, text="x"), settings=settings) for s in ("Later", "Now")
    )
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'w', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '5 minutes' WHERE id = %s",
        (sending,),
    )
    conn.commit()
    before = conn.execute("SELECT * FROM mailroom.email_queue ORDER BY id").fetchall()
    with pytest.raises(ErasureInFlight) as caught:
        erase_address(conn, ADA)
    assert "being sent right now" in str(caught.value) and ADA not in str(caught.value)
    assert conn.execute("SELECT * FROM mailroom.email_queue ORDER BY id").fetchall() == before
    # The worker gives the email back (or its lease ends): now the erasure goes through.
    conn.execute("UPDATE mailroom.email_queue SET status = 'pending' WHERE id = %s", (sending,))
    conn.commit()
    report = erase_address(conn, ADA)
    conn.commit()
    assert report.cancelled == 2 and waiting != sending


def test_erase_reaches_the_address_in_link_urls_and_unknown_payload_fields(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings
) -> None:
    directory = archive_directory(settings)
    links = ("https://shop.example/u?email=ada%40example.com", "https://shop.example/p/ada@example.com")
    old = sent_email(conn, settings, datetime.now(UTC) - timedelta(days=200), to=ADA)
    recent = sent_email(conn, settings, datetime.now(UTC) - timedelta(days=1), to=ADA)
    for email_id in (old, recent):
        for position, url in enumerate(links):
            conn.execute(
                "INSERT INTO mailroom.tracked_links (email_id, position, url) VALUES (%s, %s, %s)",
                (email_id, position, url),
            )
    conn.execute(
        "INSERT INTO mailroom.click_events (email_id, link_token, url)"
        " SELECT email_id, token, url FROM mailroom.tracked_links WHERE email_id = %s",
        (recent,),
    )
    # A producer may send more than the template needs: here a shipping address and a contact.
    extra = {"shipping_address": "12 Analytical Row, London", "contact": {"email": "Ada@Example.com"}}
    ingest_event(conn, "m-ada", "shop", "order_placed", placed(ADA, **extra), settings=settings)
    conn.commit()
    with psycopg.connect(db_url, autocommit=True) as maintenance:
        run_maintenance(maintenance, settings)
    assert archived_ids(directory) == [old]

    erase_address(conn, ADA, archive_dir=directory)
    conn.commit()
    everything = text_of_everything(conn).lower()
    for line in (line for path in directory.glob("emails-*.jsonl.gz") for _, line in read_archive(path)):
        everything += line.lower()
    for trace in ("ada@example.com", "ada%40example.com", "analytical row"):
        assert trace not in everything, trace
    [inbox] = conn.execute("SELECT payload FROM mailroom.inbox").fetchall()
    assert set(inbox["payload"]) == {
        "customer_email",
        "customer_name",
        "order_number",
        "items",
        "total",
        "currency",
    }
    assert inbox["payload"]["order_number"] == "A-1001"


def test_erase_waits_for_a_running_maintenance_and_says_so(
    db_url: str, conn: psycopg.Connection[Any], settings: Settings
) -> None:
    import logging
    import threading

    from worker.ops.retention import MAINTENANCE_LOCK_KEY

    enqueue(conn, EmailRequest(to=ADA, subject="Later", text="x"), settings=settings)
    conn.commit()
    waiting = threading.Event()

    class Waiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for the running maintenance" in record.getMessage():
                waiting.set()

    handler = Waiting()
    logger = logging.getLogger("worker.ops.privacy")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    done: list[int] = []
    try:
        with psycopg.connect(db_url, autocommit=True) as maintenance:
            maintenance.execute("SELECT pg_advisory_lock(%s)", (MAINTENANCE_LOCK_KEY,))

            def erase() -> None:
                with psycopg.connect(db_url) as own:
                    done.append(erase_address(own, ADA).cancelled)

            thread = threading.Thread(target=erase)
            thread.start()
            assert waiting.wait(timeout=30)
            assert not done  # still waiting: the archive files are the maintenance's until it ends
            maintenance.execute("SELECT pg_advisory_unlock(%s)", (MAINTENANCE_LOCK_KEY,))
            thread.join(timeout=30)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert done == [1]


def audit_rows(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    conn.commit()
    return conn.execute(
        "SELECT action, actor, target, affected, detail FROM mailroom.audit_log ORDER BY id"
    ).fetchall()


def archived_lines(directory: Path) -> list[str]:
    return [line for path in sorted(directory.glob("emails-*.jsonl.gz")) for _, line in read_archive(path)]


@pytest.fixture
def archived_every_state(db_url: str, conn: psycopg.Connection[Any], settings: Settings) -> dict[str, int]:
    """Ada's email in every final state (and one failed email of Bob's), past every default age, archived."""
    from tests.producers.helpers import AGES, finished_email

    long_ago = datetime.now(UTC) - timedelta(days=120)
    ids = {state: finished_email(conn, settings, state, long_ago, to=ADA) for state in AGES}
    ids["bob"] = finished_email(conn, settings, "failed", long_ago, to=BOB)
    with psycopg.connect(db_url, autocommit=True) as maintenance:
        report = run_maintenance(maintenance, settings)
    assert not report.errors and not {r["id"] for r in conn.execute("SELECT id FROM mailroom.email_queue")}
    conn.commit()
    return ids


def test_export_and_erase_cover_the_archives_of_every_final_state(
    conn: psycopg.Connection[Any], settings: Settings, archived_every_state: dict[str, int]
) -> None:
    directory = archive_directory(settings)
    exported = export_address(conn, ADA, directory)["archived_emails"]
    assert sorted((a["status"], a["archive_file"].rsplit("-", 3)[0]) for a in exported) == [
        ("cancelled", "emails-cancelled"),
        ("failed", "emails-expired"),
        ("failed", "emails-failed"),
        ("sent", "emails"),
        ("suppressed", "emails-suppressed"),
    ]
    assert any(ADA in (a["last_error"] or "") for a in exported)  # the bounce echoes the address
    report = erase_address(conn, ADA, archive_dir=directory)
    conn.commit()
    assert report.rows["archived_emails"] == 5 and len(report.archive_files) == 5
    lines = archived_lines(directory)
    assert len(lines) == 6 and not [line for line in lines if ADA in line.lower()]
    assert sum(report.replacement in line for line in lines) == 5
    assert export_address(conn, ADA, directory)["archived_emails"] == []
    [bob] = export_address(conn, BOB, directory)["archived_emails"]
    assert bob["id"] == archived_every_state["bob"] and BOB in bob["last_error"]


def test_export_and_erase_each_write_one_audit_row_in_their_transaction(
    conn: psycopg.Connection[Any], settings: Settings, archived_every_state: dict[str, int]
) -> None:
    from worker.core.masking import mask_address

    directory = archive_directory(settings)
    enqueue(conn, EmailRequest(to=ADA, subject="Later", text="x"), settings=settings)
    conn.commit()
    export_address(conn, ADA, directory, actor="alice")
    conn.commit()
    # Inside the caller's transaction, an erasure rolled back leaves neither its changes nor its audit row.
    conn.execute("SELECT 1")
    erase_address(conn, ADA, archive_dir=None, actor="alice")
    conn.rollback()
    assert len(audit_rows(conn)) == 1
    assert conn.execute("SELECT status FROM mailroom.email_queue").fetchall() == [{"status": "pending"}]
    report = erase_address(conn, ADA, archive_dir=directory, actor="alice")
    conn.commit()
    export, erase = audit_rows(conn)
    masked = mask_address(ADA)
    assert (export["action"], export["actor"], export["target"]) == ("privacy.export", "alice", masked)
    assert export["affected"] == 6 and export["detail"]["rows"] == {"emails": 1, "archived_emails": 5}
    assert (erase["action"], erase["actor"], erase["target"]) == ("privacy.erase", "alice", masked)
    assert erase["affected"] == report.total and erase["detail"]["rows"]["archived_emails"] == 5
    assert erase["detail"]["cancelled"] == 1 and erase["detail"]["archive_files"] == 5
    trail = json.dumps([export, erase], default=str).lower()
    assert ADA not in trail and report.replacement not in trail


def test_refused_erasure_writes_no_audit_row(conn: psycopg.Connection[Any], settings: Settings) -> None:
    from worker.ops.privacy import ErasureInFlight

    sending = enqueue(conn, EmailRequest(to=ADA, subject="Now", text="x"), settings=settings)
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'w', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '5 minutes' WHERE id = %s",
        (sending,),
    )
    conn.commit()
    with pytest.raises(ErasureInFlight):
        erase_address(conn, ADA, actor="alice")
    conn.rollback()
    assert audit_rows(conn) == []


def test_privacy_cli_audits_as_the_os_user(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    settings: Settings,
    archived_every_state: dict[str, int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    import getpass

    from worker.cli.main import main

    assert main(["privacy", "export", ADA]) == 0
    assert main(["privacy", "erase", ADA, "--yes"]) == 0
    capsys.readouterr()
    rows = audit_rows(conn)
    assert [(r["action"], r["actor"], r["affected"]) for r in rows] == [
        ("privacy.export", getpass.getuser(), 5),
        ("privacy.erase", getpass.getuser(), rows[1]["affected"]),
    ]
    assert rows[1]["affected"] >= 5
