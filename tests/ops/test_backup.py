"""Backup and restore round-trip the whole mailroom schema: queue, logs, secrets, signatures."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.fixtures_smtp import SinkFactory
from tests.worker.helpers import add_sender, enqueue_many, run_until_drained
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.db import head_revision
from worker.ops.backup import BackupError, backup, restore
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
