"""`mailroom db upgrade` writes an encrypted snapshot before it migrates an installed database, and migrates
nothing when it cannot; a fresh install, a database already there and --no-snapshot take none."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import psycopg
import pytest

from tests.cli import run
from worker.core import db
from worker.ops.backup_verify import shipped_revisions


def _previous() -> str:
    """The revision before the newest: an installed database that `db upgrade` has work for."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    down = ScriptDirectory.from_config(config).get_revision(db.head_revision()).down_revision
    assert isinstance(down, str) and down in shipped_revisions()
    return down


@pytest.fixture
def older_url(empty_db_url: str, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """A database at the revision before the newest, with a sender in it, which the commands use."""
    db.upgrade(empty_db_url, _previous())
    with psycopg.connect(empty_db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security,"
            " daily_limit) VALUES ('old', 'old@example.com', 'localhost', 25, 'none', 100)"
        )
    monkeypatch.setenv("MAILROOM_DATABASE_URL", empty_db_url)
    return empty_db_url


def test_db_upgrade_writes_a_private_snapshot_first_that_db_verify_accepts(
    older_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    previous, head = _previous(), db.head_revision()
    code, out, err = run(capsys, "db", "upgrade")
    assert (code, out) == (0, f"database at {head}\n"), err
    folder = tmp_path / "home" / "backups"  # $MAILROOM_HOME/backups
    (snapshot,) = folder.iterdir()
    assert re.fullmatch(rf"before-{previous}-to-{head}-\d{{8}}T\d{{6}}Z\.dump", snapshot.name)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(snapshot.stat().st_mode) == 0o600
    assert f"snapshot of the database at {previous}: {snapshot} (" in err and "encrypted with" in err

    code, out, err = run(capsys, "db", "verify", str(snapshot))
    assert code == 0, out + err
    assert f"ok      revision: {previous}, older than this Mailroom's {head}" in out
    assert re.search(r"^  sender_accounts +1$", out, re.M)


def test_a_failed_snapshot_migrates_nothing_and_says_how_to_go_without(
    older_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    previous = _previous()
    occupied = tmp_path / "occupied"
    occupied.write_text("a file, not a directory")
    code, _, err = run(capsys, "db", "upgrade", "--snapshot-dir", str(occupied / "backups"))
    assert code == 1
    assert "the snapshot before migrating failed, so nothing was migrated" in err
    assert "`mailroom db upgrade --no-snapshot` migrates without one" in err
    assert db.current_revision(older_url) == previous

    monkeypatch.delenv("MAILROOM_SECRET_KEY")  # a server of its own: no key is made for it
    code, _, err = run(capsys, "db", "upgrade")
    assert code == 2 and "MAILROOM_SECRET_KEY is not set" in err and "--no-snapshot" in err
    assert db.current_revision(older_url) == previous
    assert not (tmp_path / "home" / "backups").exists()


def test_db_upgrade_no_snapshot_and_snapshot_dir(
    older_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    code, _, err = run(capsys, "db", "upgrade", _previous(), "--snapshot-dir", str(elsewhere))
    assert code == 0 and not elsewhere.exists(), err  # already at that revision: nothing to keep
    code, _, err = run(capsys, "db", "upgrade", "--no-snapshot")
    assert code == 0 and "snapshot" not in err
    assert db.current_revision(older_url) == db.head_revision()
    assert not (tmp_path / "home" / "backups").exists()


def test_a_fresh_install_and_a_database_already_at_head_take_no_snapshot(
    cli_env: dict[str, str],
    empty_db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run(capsys, "db", "upgrade")[:2] == (0, f"database at {db.head_revision()} (already up to date)\n")
    monkeypatch.setenv("MAILROOM_DATABASE_URL", empty_db_url)
    code, out, err = run(capsys, "db", "upgrade")
    assert (code, out) == (0, f"database at {db.head_revision()}\n") and "snapshot" not in err
    assert not (tmp_path / "home" / "backups").exists()
