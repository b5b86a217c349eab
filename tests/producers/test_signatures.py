"""Signed document acknowledgements against a real PostgreSQL: signing, the chain, tampering, status, checksums."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import stat
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tests.producers.signature_attacks import triggers_disabled
from worker.cli.main import main
from worker.core.config import ConfigError, Settings
from worker.core.validation import ValidationError
from worker.producers.documents.signatures import (
    DocumentNotFound,
    add_document,
    document_status,
    expect_signer,
    link_hash,
    sign_document,
    verify_chain,
    verify_checksum,
)
from worker.producers.documents.signing_key import generate_key, key_path, load_signing_key

Conn = psycopg.Connection[dict[str, Any]]


def _doc(conn: Conn, settings: Settings, doc_id: str = "policy", signers: tuple[str, ...] = ()) -> None:
    add_document(conn, doc_id, title="Security policy", url="https://example.com/policy.pdf")
    for email in signers:
        expect_signer(conn, doc_id, email, name=email.split("@")[0].title(), settings=settings)
    conn.commit()


def test_signature_is_ed25519_over_the_canonical_payload(conn: Conn, settings: Settings) -> None:
    add_document(conn, "policy", checksum="ab" * 32)
    moment = datetime(2026, 11, 21, 9, 30, 15, 123456, tzinfo=UTC)
    sig = sign_document(conn, "policy", "Ada@Example.com", name="Ada Lovelace", now=moment, settings=settings)
    conn.commit()

    fields = json.loads(sig.payload)
    assert fields == {
        "v": 2,
        "key": load_signing_key(settings).fingerprint,
        "doc_id": "policy",
        "checksum": "ab" * 32,
        "checksum_algorithm": "SHA-256",
        "signer": "ada@example.com",
        "signed_at": "2026-11-21T09:30:15.123456Z",
        "nonce": sig.nonce,
        "prev_hash": None,
        "signer_name": "Ada Lovelace",
        "seq": 1,
    }
    assert sig.payload == json.dumps(fields, sort_keys=True, separators=(",", ":"))
    stored = conn.execute("SELECT * FROM mailroom.signatures").fetchone()
    assert stored is not None
    assert stored["payload_hash"] == hashlib.sha256(sig.payload.encode()).hexdigest()
    assert stored["signed_at"] == moment and stored["signer_email"] == "ada@example.com"
    # Anyone holding the public key can check it, without Mailroom.
    public = Ed25519PublicKey.from_public_bytes(load_signing_key(settings).public_bytes)
    public.verify(base64.b64decode(stored["signature"]), stored["payload"].encode())


def test_second_signature_by_the_same_signer_is_refused(conn: Conn, settings: Settings) -> None:
    _doc(conn, settings)
    sign_document(conn, "policy", "ada@example.com", settings=settings)
    conn.commit()
    with pytest.raises(ValidationError, match="already signed policy"):
        sign_document(conn, "policy", "ADA@example.com", settings=settings)
    conn.rollback()
    assert conn.execute("SELECT count(*) AS n FROM mailroom.signatures").fetchone() == {"n": 1}


def test_signing_an_unknown_document_or_bad_address_stores_nothing(conn: Conn, settings: Settings) -> None:
    _doc(conn, settings)
    with pytest.raises(DocumentNotFound):
        sign_document(conn, "nope", "ada@example.com", settings=settings)
    conn.rollback()
    with pytest.raises(ValidationError, match="email"):
        sign_document(conn, "policy", "ada@example.com\r\nBcc: x@y.z", settings=settings)
    conn.rollback()
    with pytest.raises(ValidationError, match="doc_id"):
        add_document(conn, "../etc/passwd")
    conn.rollback()
    assert conn.execute("SELECT count(*) AS n FROM mailroom.signatures").fetchone() == {"n": 0}


def test_database_enforces_one_signature_per_signer_unique_nonce_and_immutable_created_at(
    conn: Conn, settings: Settings
) -> None:
    _doc(conn, settings)
    sig = sign_document(conn, "policy", "ada@example.com", settings=settings)
    conn.commit()
    copy = (
        "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash,"
        " signature, prev_hash) SELECT doc_id, %s, signed_at, %s, payload, payload_hash, signature, %s"
        " FROM mailroom.signatures"
    )
    for signer, nonce, prev in (
        ("ada@example.com", "n" * 32, "0" * 64),  # same signer
        ("bob@example.com", sig.nonce, "1" * 64),  # same nonce
        ("bob@example.com", "m" * 32, None),  # a second chain start: a fork
    ):
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(copy, (signer, nonce, prev))
        conn.rollback()
    with pytest.raises(psycopg.errors.CheckViolation, match="immutable"):
        conn.execute("UPDATE mailroom.signatures SET created_at = created_at - interval '1 day'")
    conn.rollback()


def _sign_concurrently(db_url: str, settings: Settings, emails: list[str]) -> list[BaseException]:
    barrier = threading.Barrier(len(emails))
    errors: list[BaseException] = []

    def signer(email: str) -> None:
        try:
            with psycopg.connect(db_url) as own:
                barrier.wait(timeout=10)
                sign_document(own, "policy", email, settings=settings)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=signer, args=(e,)) for e in emails]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return errors


def test_concurrent_signers_produce_one_unbroken_chain(db_url: str, conn: Conn, settings: Settings) -> None:
    emails = [f"signer{i}@example.com" for i in range(12)]
    _doc(conn, settings, signers=tuple(emails))
    load_signing_key(settings)  # the key exists before the race; its own race is tested below

    assert _sign_concurrently(db_url, settings, emails) == []

    rows = conn.execute(
        "SELECT id, signer_email, payload_hash, signature, prev_hash FROM mailroom.signatures ORDER BY id"
    ).fetchall()
    assert sorted(r["signer_email"] for r in rows) == sorted(emails)
    assert rows[0]["prev_hash"] is None
    for before, after in itertools.pairwise(rows):
        assert after["prev_hash"] == link_hash(before["payload_hash"], before["signature"])
    report = verify_chain(conn, "policy", settings=settings)
    assert report.ok and report.checked == 12


def test_concurrent_first_uses_create_one_key_file_0600(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    barrier = threading.Barrier(8)
    keys: list[bytes] = []

    def load() -> None:
        barrier.wait(timeout=10)
        keys.append(load_signing_key(settings).public_bytes)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(keys) == 8 and len(set(keys)) == 1
    path = key_path(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["signing.key"]


def test_configured_key_is_used_and_no_file_is_written(conn: Conn, settings: Settings) -> None:
    configured = replace(settings, signing_key=generate_key())
    _doc(conn, settings)
    sign_document(conn, "policy", "ada@example.com", settings=configured)
    conn.commit()
    assert not key_path(settings).exists()
    assert verify_chain(conn, "policy", settings=configured).ok
    # Another key cannot vouch for these signatures.
    other = replace(settings, signing_key=generate_key())
    report = verify_chain(conn, "policy", settings=other)
    assert not report.ok and "Ed25519 signature does not verify" in report.broken[0].reasons
    assert f"it was made with key {load_signing_key(configured).fingerprint}" in report.summary()


def test_malformed_or_exposed_key_is_a_clear_error(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    with pytest.raises(ConfigError, match="MAILROOM_SIGNING_KEY must be 32 bytes"):
        load_signing_key(replace(settings, signing_key="bm90IGEga2V5"))
    with pytest.raises(ConfigError, match="no signing key"):
        load_signing_key(settings, create=False)
    load_signing_key(settings)
    os.chmod(key_path(settings), 0o644)
    with pytest.raises(ConfigError, match="readable by its group or others"):
        load_signing_key(settings)


TAMPERING = {
    "payload": "UPDATE mailroom.signatures SET payload = replace(payload, 'bob@', 'eve@') WHERE id = %s",
    "signature": "UPDATE mailroom.signatures SET signature = %s WHERE id = %s",
    "prev_hash": "UPDATE mailroom.signatures SET prev_hash = repeat('a', 64) WHERE id = %s",
    "signed_at": "UPDATE mailroom.signatures SET signed_at = signed_at - interval '1 day' WHERE id = %s",
}


@pytest.mark.parametrize("column", sorted(TAMPERING))
def test_verify_names_the_first_tampered_row(conn: Conn, settings: Settings, column: str) -> None:
    _doc(conn, settings)
    sigs = [
        sign_document(conn, "policy", f"{n}@example.com", settings=settings) for n in ("ada", "bob", "cy")
    ]
    conn.commit()
    assert verify_chain(conn, "policy", settings=settings).ok
    target = sigs[1].id
    forged = load_signing_key(replace(settings, signing_key=generate_key())).sign(b"forged")
    params = (forged, target) if column == "signature" else (target,)
    with triggers_disabled(conn):
        conn.execute(TAMPERING[column], params)
    conn.commit()

    report = verify_chain(conn, "policy", settings=settings)
    assert not report.ok
    assert report.first_broken is not None and report.first_broken.id == target
    assert f"signature #{target} (bob@example.com" in report.summary()
    assert all(b.id >= target for b in report.broken)


def test_verify_command_exits_1_and_names_the_broken_row(
    conn: Conn, settings: Settings, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["docs", "add", "policy", "--title", "Policy"]) == 0
    for who in ("ada", "bob"):
        assert main(["docs", "sign", "policy", f"{who}@example.com"]) == 0
    assert main(["docs", "verify"]) == 0
    assert "2 signature(s) verified, chain intact" in capsys.readouterr().out
    first = conn.execute("SELECT min(id) AS id FROM mailroom.signatures").fetchone()
    assert first is not None
    with triggers_disabled(conn):
        conn.execute(
            "UPDATE mailroom.signatures SET payload_hash = repeat('0', 64) WHERE id = %s", (first["id"],)
        )
    conn.commit()
    assert main(["docs", "verify", "policy"]) == 1
    out = capsys.readouterr().out
    assert f"BROKEN at signature #{first['id']} (ada@example.com)" in out
    assert "payload_hash is not the SHA-256 of the payload" in out


def test_status_counts_expected_signed_missing_and_unexpected(conn: Conn, settings: Settings) -> None:
    _doc(conn, settings, signers=("ada@example.com", "bob@example.com", "cy@example.com"))
    sign_document(conn, "policy", "ada@example.com", settings=settings)
    sign_document(conn, "policy", "zed@example.com", name="Zed", settings=settings)
    conn.commit()
    status = document_status(conn, "policy")
    assert (len(status.expected), status.signed, status.completion_pct) == (3, 1, 33.33)
    assert [s.email for s in status.missing] == ["bob@example.com", "cy@example.com"]
    assert [(s.email, s.name) for s in status.unexpected] == [("zed@example.com", "Zed")]
    stored_name = conn.execute(
        "SELECT signer_name FROM mailroom.signatures WHERE signer_email = 'ada@example.com'"
    )
    assert stored_name.fetchone() == {"signer_name": "Ada"}  # taken from the expected signer


def test_status_command_prints_completion(
    settings: Settings, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["docs", "add", "policy", "--title", "Policy"]) == 0
    assert main(["docs", "expect", "policy", "Ada@Example.com", "--name", "Ada", "--locale", "fr"]) == 0
    assert main(["docs", "expect", "policy", "bob@example.com"]) == 0
    assert main(["docs", "sign", "policy", "bob@example.com"]) == 0
    capsys.readouterr()
    assert main(["docs", "status", "policy", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["expected"], status["signed"], status["completion_pct"]) == (2, 1, 50.0)
    assert [m["email"] for m in status["missing"]] == ["ada@example.com"]
    assert main(["docs", "expect", "policy", "cy@example.com", "--locale", "pt"]) == 2
    assert "unknown locale 'pt'" in capsys.readouterr().err


def test_checksum_records_valid_and_invalid_verifications(
    conn: Conn, settings: Settings, tmp_path: Path
) -> None:
    doc = tmp_path / "policy.pdf"
    doc.write_bytes(b"%PDF-1.7 policy" * 1000)
    add_document(
        conn, "policy", checksum=hashlib.sha512(doc.read_bytes()).hexdigest(), checksum_algorithm="SHA-512"
    )
    add_document(conn, "plain")
    good = verify_checksum(conn, "policy", doc, verified_by="ops")
    doc.write_bytes(b"tampered")
    bad = verify_checksum(conn, "policy", doc, verified_by="ops")
    none = verify_checksum(conn, "plain", doc)
    conn.commit()
    assert good.is_valid and good.algorithm == "SHA-512" and good.error_message is None
    assert not bad.is_valid and bad.error_message is not None and "SHA-512 mismatch" in bad.error_message
    assert not none.is_valid and none.calculated_checksum == hashlib.sha256(b"tampered").hexdigest()
    rows = conn.execute(
        "SELECT doc_id, is_valid, algorithm, verified_by FROM mailroom.checksum_verifications ORDER BY id"
    ).fetchall()
    assert [(r["doc_id"], r["is_valid"], r["algorithm"]) for r in rows] == [
        ("policy", True, "SHA-512"),
        ("policy", False, "SHA-512"),
        ("plain", False, "SHA-256"),
    ]
    with pytest.raises(ValidationError, match="cannot read"):
        verify_checksum(conn, "policy", tmp_path / "missing.pdf")
    conn.rollback()
    assert conn.execute("SELECT count(*) AS n FROM mailroom.checksum_verifications").fetchone() == {"n": 3}


def test_checksum_command_exit_status_follows_the_match(
    settings: Settings, cli_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "terms.txt"
    doc.write_text("terms v1")
    assert main(["docs", "add", "terms", "--file", str(doc)]) == 0
    assert hashlib.sha256(b"terms v1").hexdigest() in capsys.readouterr().out
    assert main(["docs", "checksum", "terms", "--file", str(doc)]) == 0
    doc.write_text("terms v2")
    assert main(["docs", "checksum", "terms", "--file", str(doc)]) == 1
    assert "does NOT match" in capsys.readouterr().out


def test_docs_add_takes_a_checksum_or_a_file_not_both_and_adds_nothing_then(
    conn: psycopg.Connection[Any], cli_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "terms.txt"
    doc.write_text("terms v1")
    checksum = hashlib.sha256(b"terms v1").hexdigest()
    assert main(["docs", "add", "terms", "--checksum", checksum, "--file", str(doc)]) == 2
    assert "give --checksum or --file, not both" in capsys.readouterr().err
    assert conn.execute("SELECT count(*) AS n FROM mailroom.documents").fetchone() == {"n": 0}


def test_verify_fails_when_the_documents_checksum_no_longer_is_the_signed_one(
    conn: Conn, settings: Settings
) -> None:
    add_document(conn, "policy", checksum="a" * 64)
    for who in ("ada", "bob"):
        sign_document(conn, "policy", f"{who}@example.com", settings=settings)
    conn.commit()
    assert verify_chain(conn, "policy", settings=settings).ok
    # Swapping the document's file behind the signers' backs: they acknowledged the other one.
    conn.execute("UPDATE mailroom.documents SET checksum = %s WHERE doc_id = 'policy'", ("b" * 64,))
    conn.commit()
    report = verify_chain(conn, "policy", settings=settings)
    assert not report.ok and len(report.broken) == 2
    assert report.first_broken is not None and report.first_broken.reasons == (
        f"signed checksum {'a' * 64!r} differs from the document's {'b' * 64!r}",
    )
