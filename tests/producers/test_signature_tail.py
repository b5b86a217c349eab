"""The tamper-evident tail of the signature chain: append-only rows, the chain head, audited maintenance,
payload version 2 and exported heads, against a real PostgreSQL (issue 14)."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.producers.signature_attacks import delete_signatures, rewrite_head, triggers_disabled
from worker.cli.main import main
from worker.core import db
from worker.core.config import Settings
from worker.producers.documents.chain import canonical_payload, link_hash, sha256_hex
from worker.producers.documents.heads import chain_heads, parse_exported_heads, remove_signatures
from worker.producers.documents.signatures import (
    add_document,
    document_status,
    expect_signer,
    sign_document,
    verify_chain,
)
from worker.producers.documents.signing_key import SigningKey, load_signing_key

Conn = psycopg.Connection[dict[str, Any]]
SIGNERS = ("ada", "bob", "cy")


def _signed(
    conn: Conn, settings: Settings, doc_id: str = "policy", signers: tuple[str, ...] = SIGNERS
) -> None:
    add_document(conn, doc_id, checksum="c" * 64)
    for who in signers:
        sign_document(conn, doc_id, f"{who}@example.com", name=who.title(), settings=settings)
    conn.commit()


def _ids_by_position(conn: Conn, doc_id: str = "policy") -> dict[int, int]:
    rows = conn.execute("SELECT seq, id FROM mailroom.signatures WHERE doc_id = %s", (doc_id,)).fetchall()
    return {r["seq"]: r["id"] for r in rows}


@pytest.mark.parametrize(
    ("deleted", "named"),
    [
        ([3], "signature position 3 of 3 missing (the newest deleted)"),
        ([2], "signature position 2 of 3 missing"),
        ([1, 2, 3], "signature positions 1-3 of 3 missing (every signature deleted)"),
    ],
    ids=["newest", "middle", "all"],
)
def test_a_signature_deleted_behind_the_triggers_back_is_named_by_document_and_position(
    conn: Conn, settings: Settings, deleted: list[int], named: str
) -> None:
    _signed(conn, settings, "other", ("dan",))
    _signed(conn, settings)
    assert verify_chain(conn, "policy", settings=settings).ok
    delete_signatures(conn, "policy", deleted)

    report = verify_chain(conn, "policy", settings=settings)
    assert not report.ok
    assert report.missing == tuple(deleted)
    assert report.checked == 3 - len(deleted)
    assert report.summary() == f"policy: BROKEN: {named}"
    assert verify_chain(conn, "other", settings=settings).ok


def test_a_middle_deletion_also_breaks_the_next_signatures_link(conn: Conn, settings: Settings) -> None:
    _signed(conn, settings)
    third = _ids_by_position(conn)[3]
    delete_signatures(conn, "policy", [2])
    report = verify_chain(conn, "policy", settings=settings)
    assert [b.id for b in report.broken] == [third]
    assert "prev_hash does not link to the previous signature" in report.broken[0].reasons


def test_a_document_with_expected_signers_and_no_signature_yet_is_intact(
    conn: Conn, settings: Settings
) -> None:
    add_document(conn, "policy")
    expect_signer(conn, "policy", "ada@example.com", settings=settings)
    conn.commit()
    report = verify_chain(conn, "policy", settings=settings)
    assert report.ok and report.head is not None and report.head.count == 0
    assert report.summary() == "policy: 0 signature(s) verified, chain intact"


def test_a_deleted_head_row_is_reported(conn: Conn, settings: Settings) -> None:
    _signed(conn, settings, signers=())
    conn.execute("ALTER TABLE mailroom.signature_heads DISABLE TRIGGER USER")
    conn.execute("DELETE FROM mailroom.signature_heads WHERE doc_id = 'policy'")
    conn.execute("ALTER TABLE mailroom.signature_heads ENABLE TRIGGER USER")
    conn.commit()
    report = verify_chain(conn, "policy", settings=settings)
    assert report.summary() == "policy: BROKEN: no chain head: the document's head row was deleted"


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE mailroom.signatures SET signer_name = 'Eve'",
        "UPDATE mailroom.signatures SET payload = payload",
        "DELETE FROM mailroom.signatures WHERE seq = 2",
        "TRUNCATE mailroom.signatures",
        "UPDATE mailroom.signature_heads SET count = 1",
        "DELETE FROM mailroom.signature_heads",
        "TRUNCATE mailroom.signature_heads",
    ],
)
def test_a_writer_cannot_change_or_remove_signatures_or_their_heads(
    conn: Conn, settings: Settings, statement: str
) -> None:
    _signed(conn, settings)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"append-only|kept by the signatures"):
        conn.execute(statement)
    conn.rollback()
    assert verify_chain(conn, "policy", settings=settings).ok


def test_the_bypass_setting_alone_does_not_open_the_table(conn: Conn, settings: Settings) -> None:
    _signed(conn, settings)
    _signed(conn, settings, "other", ("dan",))
    # An audit row for another document, or none at all, does not let this one's signatures go.
    audit = conn.execute("SELECT mailroom.audit('signatures.maintenance', 'me', 'other') AS id").fetchone()
    assert audit is not None
    for setting in (str(audit["id"]), "999999", "x"):
        conn.execute("SELECT set_config('mailroom.signature_maintenance', %s, true)", (setting,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM mailroom.signatures WHERE doc_id = 'policy'")
        conn.rollback()


def test_maintenance_removes_a_documents_signatures_with_one_audit_row_and_resets_its_head(
    conn: Conn, settings: Settings
) -> None:
    _signed(conn, settings)
    _signed(conn, settings, "other", ("dan",))
    assert remove_signatures(conn, "policy", reason="test document", actor="ops") == 3
    conn.commit()

    audit = conn.execute("SELECT actor, action, target, affected, detail FROM mailroom.audit_log").fetchall()
    assert len(audit) == 1
    assert audit[0] | {"detail": None} == {
        "actor": "ops",
        "action": "signatures.maintenance",
        "target": "policy",
        "affected": 3,
        "detail": None,
    }
    assert audit[0]["detail"]["reason"] == "test document" and audit[0]["detail"]["head_count"] == 3
    heads, _ = chain_heads(conn)
    assert [(h.doc_id, h.count, h.last_hash is None) for h in heads] == [
        ("other", 1, False),
        ("policy", 0, True),
    ]
    assert verify_chain(conn, "policy", settings=settings).ok
    assert verify_chain(conn, "other", settings=settings).ok
    # The document starts a new chain, and the table is closed again.
    sign_document(conn, "policy", "ada@example.com", settings=settings)
    conn.commit()
    report = verify_chain(conn, "policy", settings=settings)
    assert report.ok and report.checked == 1 and report.head is not None and report.head.count == 1
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("DELETE FROM mailroom.signatures WHERE doc_id = 'policy'")


def test_maintenance_from_sql_needs_a_reason_and_a_known_document(conn: Conn, settings: Settings) -> None:
    _signed(conn, settings)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="needs a reason"):
        conn.execute("SELECT mailroom.signature_maintenance('policy', ' ', 'ops')")
    conn.rollback()
    with pytest.raises(psycopg.errors.NoDataFound, match="no document nope"):
        conn.execute("SELECT mailroom.signature_maintenance('nope', 'cleanup', 'ops')")
    conn.rollback()
    removed = conn.execute("SELECT mailroom.signature_maintenance('policy', 'erase', 'app') AS n").fetchone()
    assert removed == {"n": 3}
    assert conn.execute("SELECT count(*) AS n FROM mailroom.audit_log").fetchone() == {"n": 1}


def test_a_signature_inserted_out_of_position_is_refused(conn: Conn, settings: Settings) -> None:
    _signed(conn, settings, signers=("ada",))
    with pytest.raises(psycopg.errors.CheckViolation, match="the chain's next position is 2"):
        conn.execute(
            "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash,"
            " signature, seq) VALUES ('policy', 'x@x.io', now(), 'nonce-0000000000009', 'p', repeat('a', 64),"
            " 'sig', 5)"
        )


@pytest.mark.parametrize(
    ("column", "value"), [("signer_name", "Eve"), ("signer_email", "eve@example.com"), ("seq", 7)]
)
def test_editing_a_shown_field_of_a_signature_is_detected(
    conn: Conn, settings: Settings, column: str, value: object
) -> None:
    _signed(conn, settings)
    target = _ids_by_position(conn)[2]
    update = sql.SQL("UPDATE mailroom.signatures SET {} = %s WHERE id = %s").format(sql.Identifier(column))
    with triggers_disabled(conn):
        conn.execute(update, (value, target))
    conn.commit()
    report = verify_chain(conn, "policy", settings=settings)
    assert not report.ok
    [edited] = [b for b in report.broken if b.id == target]
    signed = {"signer_name": "'Bob'", "signer_email": "'bob@example.com'", "seq": "2"}[column]
    payload_name = column.replace("_email", "")
    assert f"payload {payload_name} {signed} differs from the stored {value!r}" in edited.reasons


def _v1_row(key: SigningKey, doc_id: str, who: str, prev: str | None) -> dict[str, Any]:
    nonce = secrets.token_urlsafe(24)
    signed_at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    payload = canonical_payload(
        doc_id=doc_id,
        checksum=None,
        checksum_algorithm=None,
        signer_email=f"{who}@example.com",
        signed_at=signed_at,
        nonce=nonce,
        prev_hash=prev,
        key=key.fingerprint,
        version=1,
    )
    signature = key.sign(payload.encode())
    return {
        "doc_id": doc_id,
        "email": f"{who}@example.com",
        "name": who.title(),
        "at": signed_at,
        "nonce": nonce,
        "payload": payload,
        "hash": sha256_hex(payload),
        "sig": signature,
        "prev": prev,
    }


INSERT_V1 = """
INSERT INTO mailroom.signatures (doc_id, signer_email, signer_name, signed_at, nonce, payload, payload_hash,
                                 signature, prev_hash)
VALUES (%(doc_id)s, %(email)s, %(name)s, %(at)s, %(nonce)s, %(payload)s, %(hash)s, %(sig)s, %(prev)s)
"""


def test_version_1_signatures_made_before_the_head_existed_still_verify_and_the_chain_goes_on_in_version_2(
    empty_db_url: str, tmp_path: Path
) -> None:
    settings = Settings(home=tmp_path / "home", database_url=empty_db_url)
    key = load_signing_key(settings)
    db.upgrade(empty_db_url, "0005")
    with psycopg.connect(empty_db_url) as old:
        old.execute("INSERT INTO mailroom.documents (doc_id) VALUES ('policy'), ('empty')")
        prev = None
        for who in ("ada", "bob"):
            row = _v1_row(key, "policy", who, prev)
            old.execute(INSERT_V1, row)
            prev = link_hash(row["hash"], row["sig"])
    db.upgrade(empty_db_url)

    with psycopg.connect(empty_db_url, row_factory=dict_row) as conn:
        heads, _ = chain_heads(conn)
        assert [(h.doc_id, h.count, h.last_hash) for h in heads] == [("empty", 0, None), ("policy", 2, prev)]
        report = verify_chain(conn, "policy", key=key)
        assert report.ok and report.checked == 2
        sign_document(conn, "policy", "cy@example.com", name="Cy", settings=settings, key=key)
        conn.commit()
        report = verify_chain(conn, "policy", key=key)
        assert report.ok and report.checked == 3
        versions = conn.execute(
            "SELECT seq, payload::jsonb ->> 'v' AS v FROM mailroom.signatures ORDER BY seq"
        )
        assert [(r["seq"], r["v"]) for r in versions.fetchall()] == [(1, "1"), (2, "1"), (3, "2")]
        # A version 1 signature is still held to its own rules: its signed fields cannot change.
        with triggers_disabled(conn):
            conn.execute("UPDATE mailroom.signatures SET signer_email = 'eve@example.com' WHERE seq = 1")
        conn.commit()
        assert not verify_chain(conn, "policy", key=key).ok


def _export(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> None:
    capsys.readouterr()
    assert main(["docs", "head", *args]) == 0
    path.write_text(capsys.readouterr().out)


@pytest.mark.parametrize("form", ["--json", "text"])
def test_verify_against_an_exported_head_names_rows_removed_even_when_the_head_table_was_rewritten(
    conn: Conn, cli_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    assert main(["docs", "add", "policy"]) == 0
    for who in SIGNERS:
        assert main(["docs", "sign", "policy", f"{who}@example.com"]) == 0
    head_file = tmp_path / "heads"
    _export(capsys, head_file, *([form] if form == "--json" else []))
    assert parse_exported_heads(head_file.read_text()).heads["policy"].count == 3
    assert main(["docs", "verify", "--head", str(head_file)]) == 0

    delete_signatures(conn, "policy", [3])
    assert main(["docs", "verify"]) == 1
    assert "policy: BROKEN: signature position 3 of 3 missing (the newest deleted)" in capsys.readouterr().out
    # A thorough attacker makes the head table agree: the database alone no longer sees it, the export does.
    rewrite_head(conn, "policy")
    assert main(["docs", "verify"]) == 0
    capsys.readouterr()
    assert main(["docs", "verify", "--head", str(head_file)]) == 1
    out = capsys.readouterr().out
    assert (
        "policy: BROKEN: signature position 3 of 3 missing since the exported head (the newest deleted)"
        in out
    )
    assert "the newest signature of the exported head (position 3) is no longer in the chain" in out


def test_remove_signatures_command_is_audited_and_an_exported_head_names_it(
    conn: Conn,
    settings: Settings,
    cli_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _signed(conn, settings)
    head_file = tmp_path / "heads.json"
    _export(capsys, head_file, "--json", "policy")
    exported = json.loads(head_file.read_text())
    assert [(h["doc_id"], h["count"]) for h in exported["heads"]] == [("policy", 3)]
    remove = ["docs", "remove-signatures", "policy", "--reason", "privacy erase", "--by", "ops"]
    assert main(remove) == 2
    assert "add --yes to confirm" in capsys.readouterr().err
    assert main(["docs", "verify", "policy", "--head", str(head_file)]) == 0
    assert main([*remove, "--yes"]) == 0
    assert "policy: removed 3 signature(s)" in capsys.readouterr().out

    assert main(["docs", "verify", "policy", "--head", str(head_file), "--json"]) == 1
    [report] = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["missing_positions"] == []
    assert report["problems"][0].startswith("signature positions 1-3 of 3 missing since the exported head")
    assert any("signatures.maintenance by ops" in p and "privacy erase" in p for p in report["problems"])


def test_head_command_names_an_unknown_document_and_verify_refuses_a_foreign_file(
    conn: Conn,
    settings: Settings,
    cli_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _signed(conn, settings)
    assert main(["docs", "head", "nope"]) == 2
    assert "no document 'nope'" in capsys.readouterr().err
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"heads": []}))
    assert main(["docs", "verify", "--head", str(foreign)]) == 2
    assert "not a head file written by `mailroom docs head`" in capsys.readouterr().err


def test_a_document_never_signed_can_still_be_deleted_and_its_head_goes_with_it(conn: Conn) -> None:
    add_document(conn, "draft")
    conn.commit()
    assert conn.execute("SELECT count(*) AS n FROM mailroom.signature_heads").fetchone() == {"n": 1}
    conn.execute("DELETE FROM mailroom.documents WHERE doc_id = 'draft'")
    conn.commit()
    assert conn.execute("SELECT count(*) AS n FROM mailroom.signature_heads").fetchone() == {"n": 0}


def test_status_shows_a_signer_by_the_name_they_signed_with(conn: Conn, settings: Settings) -> None:
    add_document(conn, "policy")
    for email in ("ada@example.com", "bob@example.com"):
        expect_signer(conn, "policy", email, name="Expected", settings=settings)
    sign_document(conn, "policy", "ada@example.com", name="Ada Lovelace", settings=settings)
    expect_signer(conn, "policy", "ada@example.com", name="Renamed Later", settings=settings)
    conn.commit()
    status = document_status(conn, "policy")
    assert [(s.email, s.name) for s in status.expected] == [
        ("ada@example.com", "Ada Lovelace"),
        ("bob@example.com", "Expected"),
    ]
