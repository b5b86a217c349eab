"""Backup and restore round-trip the whole mailroom schema: queue, logs, secrets, signatures; an encrypted
backup shows nothing of the dump, opens with its key only, and restores nothing when altered."""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.cli import run
from tests.fixtures_smtp import SinkFactory
from tests.worker.helpers import add_sender, enqueue_many, run_until_drained
from worker.core.config import Settings
from worker.core.crypto import SecretBox, generate_key
from worker.core.db import head_revision
from worker.ops import backup as backups
from worker.ops.backup import BackupError, backup, backup_into, restore
from worker.ops.backup_crypto import CHUNK_SIZE, HEADER_SIZE, MAGIC, TAG_SIZE, BackupKey, KeySource
from worker.producers.documents.records import add_document, expect_signer
from worker.producers.documents.signatures import sign_document, verify_chain

COUNTED = ("email_queue", "send_logs", "sender_accounts", "signatures", "documents", "expected_signers")


def _counts(url: str) -> dict[str, int]:
    counts = {}
    with psycopg.connect(url) as conn:
        for table in COUNTED:
            query = sql.SQL("SELECT count(*) FROM mailroom.{}").format(sql.Identifier(table))
            row = conn.execute(query).fetchone()
            counts[table] = int(row[0]) if row else -1
    return counts


def test_a_backup_restored_into_an_empty_database_has_everything(
    db_url: str, empty_db_url: str, settings: Settings, smtp_sink_factory: SinkFactory, tmp_path: Path
) -> None:
    sink = smtp_sink_factory(auth=("mailer", "relay-secret"))
    add_sender(db_url, sink.port, username="mailer", password="relay-secret", settings=settings)
    enqueue_many(db_url, 5)
    asyncio.run(run_until_drained(db_url, settings))
    with psycopg.connect(db_url) as conn:
        add_document(conn, "policy", title="Policy", url="https://example.com/p.pdf")
        expect_signer(conn, "policy", "ada@example.com", name="Ada", settings=settings)
        expect_signer(conn, "policy", "bob@example.com", name="Bob", settings=settings)
        sign_document(conn, "policy", "ada@example.com", name="Ada", settings=settings)
        sign_document(conn, "policy", "bob@example.com", name="Bob", settings=settings)
        conn.commit()

    target = tmp_path / "mailroom.dump"
    written = backup(db_url, target)
    assert written.bytes > 0 and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".*partial"))
    restore(empty_db_url, target)

    assert _counts(empty_db_url) == _counts(db_url)
    assert _counts(empty_db_url)["send_logs"] >= 5 and _counts(empty_db_url)["signatures"] == 2
    with psycopg.connect(empty_db_url) as conn:
        row = conn.execute("SELECT smtp_password_encrypted FROM mailroom.sender_accounts").fetchone()
        assert row is not None
        assert SecretBox(settings.secret_key or "").decrypt(bytes(row[0])) == "relay-secret"
        assert verify_chain(conn, "policy", settings=settings).ok
        revision = conn.execute("SELECT version_num FROM mailroom.alembic_version").fetchone()
    assert revision is not None and revision[0] == head_revision()


def test_restore_refuses_a_database_that_already_has_mailroom_and_changes_nothing(
    db_url: str, tmp_path: Path
) -> None:
    target = tmp_path / "b.dump"
    backup(db_url, target)
    with pytest.raises(BackupError, match="already has a mailroom schema"):
        restore(db_url, target)


def test_a_failed_backup_leaves_no_file_behind(empty_db_url: str, tmp_path: Path) -> None:
    target = tmp_path / "b.dump"
    with pytest.raises(BackupError, match=r"pg_dump failed: .*no matching schemas"):
        backup(empty_db_url, target)  # nothing of Mailroom's there: pg_dump refuses
    assert list(tmp_path.iterdir()) == []


def test_a_failed_encrypted_backup_leaves_no_file_behind(empty_db_url: str, tmp_path: Path) -> None:
    key = BackupKey.from_text(generate_key(), KeySource.SECRET_KEY)
    with pytest.raises(BackupError, match=r"pg_dump failed: .*no matching schemas"):
        backup(empty_db_url, tmp_path / "b.dump", key)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_encrypted_backup_leaves_no_file_behind(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt  # Ctrl-C while the dump streams

    monkeypatch.setattr(backups, "encrypt_stream", interrupted)
    key = BackupKey.from_text(generate_key(), KeySource.SECRET_KEY)
    with pytest.raises(KeyboardInterrupt):
        backup(db_url, tmp_path / "b.dump", key)
    assert list(tmp_path.iterdir()) == []


SEALED_CHUNK = CHUNK_SIZE + TAG_SIZE


def _fill(db_url: str, megabytes: int) -> str:
    """Emails, and `megabytes` of random attachment bytes, which no compression shrinks: the dump takes
    several chunks. Returns a recipient's address, which the dump holds."""
    enqueue_many(db_url, 5)
    with psycopg.connect(db_url) as conn:
        for _ in range(megabytes):
            conn.execute(
                "INSERT INTO mailroom.attachment_contents (sha256, content) VALUES (sha256(%(c)s), %(c)s)",
                {"c": os.urandom(1 << 20)},
            )
    return "u3@example.com"


def _chunks(data: bytes) -> tuple[bytes, list[bytes]]:
    body = data[HEADER_SIZE:]
    return data[:HEADER_SIZE], [body[i : i + SEALED_CHUNK] for i in range(0, len(body), SEALED_CHUNK)]


def test_db_backup_encrypts_by_default_shows_nothing_of_the_dump_and_restores_with_the_key(
    cli_env: dict[str, str],
    db_url: str,
    empty_db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recipient = _fill(db_url, 3)
    sealed, plain = tmp_path / "sealed.dump", tmp_path / "plain.dump"
    code, out, err = run(capsys, "db", "backup", str(sealed))
    assert code == 0, err
    assert "encrypted with MAILROOM_SECRET_KEY, key id" in out
    assert run(capsys, "db", "backup", "--no-encrypt", str(plain))[0] == 0
    assert stat.S_IMODE(sealed.stat().st_mode) == 0o600 and stat.S_IMODE(plain.stat().st_mode) == 0o600
    shown = plain.read_bytes()
    assert shown.startswith(b"PGDMP") and b"email_queue" in shown  # the table of contents is plain text
    data = sealed.read_bytes()
    assert data.startswith(MAGIC) and len(_chunks(data)[1]) >= 3
    assert b"PGDMP" not in data and b"email_queue" not in data and recipient.encode() not in data

    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))  # where the decrypted dump goes, briefly
    monkeypatch.setenv("MAILROOM_DATABASE_URL", empty_db_url)
    code, out, err = run(capsys, "db", "restore", str(sealed))
    assert code == 0, err
    assert _counts(empty_db_url) == _counts(db_url)
    assert list(private.iterdir()) == []  # the decrypted dump and its directory are gone

    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA mailroom CASCADE")
    code, out, err = run(capsys, "db", "restore", str(plain))  # a plain pg_dump still restores
    assert code == 0, err
    assert "not encrypted" in out and _counts(empty_db_url) == _counts(db_url)


def _flipped(data: bytes) -> bytes:
    middle = bytearray(data)
    middle[len(data) // 2] ^= 0x40
    return bytes(middle)


def _last_dropped(data: bytes) -> bytes:
    header, chunks = _chunks(data)
    return header + b"".join(chunks[:-1])


def _appended(data: bytes) -> bytes:
    return data + _chunks(data)[1][1]


def _swapped(data: bytes) -> bytes:
    header, chunks = _chunks(data)
    return header + chunks[1] + chunks[0] + b"".join(chunks[2:])


ALTERED: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "a byte flipped in the middle": (_flipped, "damaged or tampered with: chunk"),
    "its last chunk dropped": (_last_dropped, "truncated: the backup ends after chunk"),
    "a chunk appended": (_appended, "tampered with"),
    "two chunks swapped": (_swapped, "damaged or tampered with: chunk 0 does not authenticate"),
}


def test_an_encrypted_backup_with_another_key_or_altered_in_any_way_restores_nothing(
    cli_env: dict[str, str],
    db_url: str,
    empty_db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fill(db_url, 3)
    sealed = tmp_path / "sealed.dump"
    assert run(capsys, "db", "backup", str(sealed))[0] == 0
    data = sealed.read_bytes()
    monkeypatch.setenv("MAILROOM_DATABASE_URL", empty_db_url)
    for what, (alter, message) in ALTERED.items():
        altered = tmp_path / "altered.dump"
        altered.write_bytes(alter(data))
        code, _, err = run(capsys, "db", "restore", str(altered))
        last = err.splitlines()[-1]
        assert code == 1 and message in last and last.endswith("; nothing was restored"), (what, err)
        assert not backups.has_schema(empty_db_url), what

    monkeypatch.setenv("MAILROOM_SECRET_KEY", generate_key())
    code, _, err = run(capsys, "db", "restore", str(sealed))
    assert code == 1 and "wrong key: this backup was encrypted with key id" in err, err
    assert not backups.has_schema(empty_db_url)


def test_a_backup_key_file_must_be_private_and_is_asked_for_on_restore(
    cli_env: dict[str, str],
    empty_db_url: str,
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key_file, target = tmp_path / "backup.key", tmp_path / "b.dump"
    key_file.write_text(generate_key() + "\n")
    key_file.chmod(0o640)
    code, _, err = run(capsys, "db", "backup", "--key-file", str(key_file), str(target))
    assert code == 2 and "is readable by its group or others; run `chmod 600" in err
    assert not target.exists()
    key_file.chmod(0o600)
    code, out, err = run(capsys, "db", "backup", "--key-file", str(key_file), str(target))
    assert code == 0 and "encrypted with a backup key file (--key-file)" in out, err

    monkeypatch.setenv("MAILROOM_DATABASE_URL", empty_db_url)
    code, _, err = run(capsys, "db", "restore", str(target))
    assert code == 2 and "was encrypted with a backup key file: give it with --key-file PATH" in err
    code, _, err = run(capsys, "db", "restore", "--key-file", str(key_file), str(target))
    assert code == 0, err
    assert _counts(empty_db_url) == _counts(db_url)


def test_backups_in_a_directory_keep_the_newest_and_touch_nothing_else(db_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "backups"
    start = datetime(2026, 3, 1, 2, 15, tzinfo=UTC)
    written = [backup_into(db_url, folder, None, keep=2, now=start + timedelta(days=n)) for n in range(2)]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (folder / "notes.txt").write_text("mine")
    (folder / "before-0014-to-0015-20260101T000000Z.dump").write_bytes(b"PGDMP")
    result, removed = backup_into(db_url, folder, None, keep=2, now=start + timedelta(days=2))
    assert result.path.name == "mailroom-20260303T021500Z.dump"
    assert removed == [written[0][0].path] and written[1][1] == []
    assert sorted(p.name for p in folder.iterdir()) == [
        "before-0014-to-0015-20260101T000000Z.dump",
        "mailroom-20260302T021500Z.dump",
        "mailroom-20260303T021500Z.dump",
        "notes.txt",
    ]


def test_db_backup_takes_a_file_or_a_directory_and_keep_only_with_a_directory(
    cli_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "db", "backup")[0] == 2
    assert run(capsys, "db", "backup", str(tmp_path / "b.dump"), "--keep", "3")[0] == 2
    assert run(capsys, "db", "backup", "--no-encrypt", "--key-file", "k", str(tmp_path / "b.dump"))[0] == 2
    code, out, err = run(capsys, "db", "backup", "--dir", str(tmp_path / "d"), "--keep", "1")
    assert code == 0, err
    assert [p.name for p in (tmp_path / "d").iterdir()] == [Path(out.split()[1]).name]
