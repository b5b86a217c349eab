"""`mailroom db verify`: a backup restored into a scratch database, checked, and the scratch database dropped
whatever happened."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.cli import run
from tests.fixtures_db import drop_roles, role_url
from tests.ops.helpers import audit_rows
from tests.worker.helpers import add_sender, enqueue_many
from worker.core.config import Settings
from worker.core.crypto import generate_key
from worker.core.db import head_revision
from worker.ops import backup_verify

SCRATCH = re.compile(r"scratch database (mailroom_verify_[0-9a-f]{12})")


def _scratch(err: str) -> str:
    found = SCRATCH.search(err)
    assert found, err
    return found.group(1)


def _exists(db_url: str, name: str) -> bool:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def _backed_up(db_url: str, path: Path, capsys: pytest.CaptureFixture[str], *options: str) -> Path:
    add_sender(db_url, 2525)  # audited: the chain has a row to verify
    enqueue_many(db_url, 5)
    code, _, err = run(capsys, "db", "backup", *options, str(path))
    assert code == 0, err
    return path


def test_db_verify_checks_a_good_backup_prints_what_it_checked_and_drops_the_scratch_database(
    cli_env: dict[str, str], db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = _backed_up(db_url, tmp_path / "b.dump", capsys)
    code, out, err = run(capsys, "db", "verify", str(target))
    assert code == 0, out + err
    assert "ok      opens: every chunk authenticates with MAILROOM_SECRET_KEY" in out
    assert "ok      restores: pg_restore loaded it in one transaction" in out
    assert f"ok      revision: {head_revision()}, the newest this Mailroom knows" in out
    assert f"ok      audit chain: {len(audit_rows(db_url))} row(s) verified" in out
    assert re.search(r"^  email_queue +5$", out, re.M) and re.search(r"^  sender_accounts +1$", out, re.M)
    assert out.endswith(f"{target}: verified: every check passed\n")
    name = _scratch(err)
    assert f"dropped scratch database {name}" in err and not _exists(db_url, name)


def test_db_backup_verify_writes_then_verifies(
    cli_env: dict[str, str], db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url, 2525)
    code, out, err = run(capsys, "db", "backup", "--verify", "--no-encrypt", str(tmp_path / "b.dump"))
    assert code == 0, out + err
    assert out.startswith("wrote ") and "ok      opens: a plain pg_dump (not encrypted)" in out
    assert not _exists(db_url, _scratch(err))


def test_db_verify_refuses_a_tampered_backup_before_making_any_database(
    cli_env: dict[str, str], db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = _backed_up(db_url, tmp_path / "b.dump", capsys)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    code, out, err = run(capsys, "db", "verify", str(target))
    assert code == 1
    assert "FAILED  cannot open" in out and "does not authenticate" in out and "nothing was verified" in out
    assert out.endswith("NOT verified: a check failed\n") and "scratch database" not in err


def test_db_verify_fails_on_a_dump_that_does_not_restore_and_still_drops_the_scratch_database(
    cli_env: dict[str, str], db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = _backed_up(db_url, tmp_path / "b.dump", capsys, "--no-encrypt")
    data = target.read_bytes()
    # Cut inside its table of contents (most of a small dump); a plain dump has nothing to say it was cut,
    # and pg_restore reads one cut near its end without complaint.
    target.write_bytes(data[: len(data) // 3])
    code, out, err = run(capsys, "db", "verify", str(target))
    assert code == 1
    assert "FAILED  pg_restore failed (nothing was restored)" in out
    assert not _exists(db_url, _scratch(err))


def test_db_verify_fails_on_a_backup_whose_audit_chain_was_edited(
    cli_env: dict[str, str], db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url, 2525)
    with psycopg.connect(db_url) as conn:
        conn.execute("ALTER TABLE mailroom.audit_log DISABLE TRIGGER audit_log_append_only")
        conn.execute("UPDATE mailroom.audit_log SET actor = 'mallory' WHERE seq = 1")
        conn.execute("ALTER TABLE mailroom.audit_log ENABLE TRIGGER audit_log_append_only")
    assert run(capsys, "db", "backup", str(tmp_path / "b.dump"))[0] == 0
    code, out, err = run(capsys, "db", "verify", str(tmp_path / "b.dump"))
    assert code == 1
    assert re.search(r"^FAILED  audit chain: row #\d+ \(position 1, .*\) was edited", out, re.M), out
    assert not _exists(db_url, _scratch(err))


def test_db_verify_interrupted_drops_the_scratch_database(
    cli_env: dict[str, str],
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = _backed_up(db_url, tmp_path / "b.dump", capsys)
    seen: list[str] = []

    def interrupted(conn: psycopg.Connection[object], drill: backup_verify.Verification, say: object) -> None:
        seen.append(drill.database)
        assert _exists(db_url, drill.database)  # restored and there, when Ctrl-C comes
        raise KeyboardInterrupt

    monkeypatch.setattr(backup_verify, "_check", interrupted)
    code, _, err = run(capsys, "db", "verify", str(target))
    assert code == 1 and "aborted" in err
    assert seen and not _exists(db_url, seen[0])


def test_db_verify_says_the_role_needs_createdb(
    cli_env: dict[str, str],
    db_url: str,
    role_lock: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = _backed_up(db_url, tmp_path / "b.dump", capsys)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOCREATEDB").format(sql.Identifier("mr_no_createdb")))
    try:
        monkeypatch.setenv("MAILROOM_DATABASE_URL", role_url(db_url, "mr_no_createdb"))
        code, out, err = run(capsys, "db", "verify", str(target))
    finally:
        drop_roles(db_url, "mr_no_createdb")
    assert code == 2 and out == ""
    assert "role mr_no_createdb may not create databases: grant it CREATEDB" in err


def test_db_verify_checks_every_stored_secret_decrypts_with_the_key_in_use(
    cli_env: dict[str, str],
    db_url: str,
    settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_sender(db_url, 2525, username="relay", password="relay-password", settings=settings, name="second")
    target = _backed_up(db_url, tmp_path / "b.dump", capsys, "--key-file", str(_key_file(tmp_path)))
    argv = ("db", "verify", "--key-file", str(tmp_path / "backup.key"), str(target))
    code, out, err = run(capsys, *argv)
    assert code == 0, out + err
    assert "ok      secrets: 1 stored, every one decrypts with MAILROOM_SECRET_KEY" in out
    # The key was rotated since (or is not the one the backup's Mailroom used): the drill fails, and says why.
    monkeypatch.setenv("MAILROOM_SECRET_KEY", generate_key())
    code, out, err = run(capsys, *argv)
    assert code == 1
    assert (
        "FAILED  secrets: 1 of 1 do not decrypt with MAILROOM_SECRET_KEY (sender account second: password)"
        in out
    )
    assert "keep the old key after `keys rotate`" in out and not _exists(db_url, _scratch(err))
    monkeypatch.delenv("MAILROOM_SECRET_KEY")
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "ok      secrets: not checked (no MAILROOM_SECRET_KEY given)" in out


def _key_file(tmp_path: Path) -> Path:
    path = tmp_path / "backup.key"
    path.write_text(generate_key())
    path.chmod(0o600)
    return path
