"""`mailroom keys rotate`: every stored secret re-encrypted to a new key in one audited transaction, or none."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.cli import run
from tests.ops.helpers import audit_rows
from worker.cli.main import main
from worker.core.config import ConfigError
from worker.core.crypto import SecretBox, generate_key
from worker.ops.keys import key_id
from worker.ops.senders import SenderSpec, add_sender

PASSWORDS = {"first": "relay-secret-1", "second": "relay-secret-2"}


def add_senders(db_url: str, key: str, pem: bytes) -> None:
    """Two accounts with passwords (one also with a DKIM key) and one with no secret at all."""
    box = SecretBox(key)
    with psycopg.connect(db_url) as conn:
        for name, password in PASSWORDS.items():
            dkim = {"dkim_domain": "example.org", "dkim_selector": "mail2026"} if name == "first" else {}
            spec = SenderSpec(name, "noreply@example.org", "smtp.example.org", 587, smtp_username="u", **dkim)
            add_sender(conn, spec, password, box, pem if dkim else None)
        add_sender(conn, SenderSpec("open-relay", "noreply@example.org", "127.0.0.1", 25), None, box)


def stored(db_url: str) -> dict[str, tuple[Any, Any]]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT name, smtp_password_encrypted, dkim_private_key_encrypted FROM mailroom.sender_accounts"
        ).fetchall()
    return {str(r[0]): (r[1], r[2]) for r in rows}


def test_rotation_reencrypts_every_secret_so_only_the_new_key_reads_them_and_audits_it(
    cli_env: dict[str, str],
    db_url: str,
    secret_key: str,
    pem: bytes,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_senders(db_url, secret_key, pem)
    new_key = generate_key()
    monkeypatch.setenv("MAILROOM_NEW_SECRET_KEY", new_key)
    code, out, _ = run(capsys, "keys", "rotate")
    assert code == 0
    assert (
        "re-encrypted 3 secret(s) (2 SMTP password(s), 1 DKIM key(s), 0 OAuth2 secret(s)) of 2 sender account(s)"
        in out
    )
    assert key_id(new_key) in out and new_key not in out
    secrets = stored(db_url)
    new, old = SecretBox(new_key), SecretBox(secret_key)
    for name, password in PASSWORDS.items():
        assert new.decrypt(secrets[name][0]) == password
        with pytest.raises(ConfigError):
            old.decrypt(secrets[name][0])
    assert new.decrypt(secrets["first"][1]).startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert secrets["open-relay"] == (None, None)
    rotation = audit_rows(db_url)[-1]
    assert (rotation["action"], rotation["actor"], rotation["affected"]) == (
        "keys.rotate",
        getpass.getuser(),
        3,
    )
    assert rotation["detail"] == {
        "accounts": 2,
        "passwords": 2,
        "dkim_keys": 1,
        "oauth_secrets": 0,
        "gmail_keys": 0,
        "webhook_secrets": 0,
        "new_key_id": key_id(new_key),
    }


def test_rotation_refuses_when_a_secret_does_not_decrypt_with_the_current_key_and_changes_nothing(
    cli_env: dict[str, str],
    db_url: str,
    pem: bytes,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_senders(db_url, generate_key(), pem)  # stored with a key other than MAILROOM_SECRET_KEY
    before = stored(db_url)
    audited = len(audit_rows(db_url))
    monkeypatch.setenv("MAILROOM_NEW_SECRET_KEY", generate_key())
    code, out, err = run(capsys, "keys", "rotate")
    assert code == 2 and out == ""
    assert "3 stored secret(s) do not decrypt with the current MAILROOM_SECRET_KEY" in err
    assert "sender account first: password, sender account first: DKIM key" in err
    assert "nothing was re-encrypted" in err
    assert stored(db_url) == before
    assert len(audit_rows(db_url)) == audited


def test_the_new_key_is_read_from_a_file_only_its_owner_can_read(
    cli_env: dict[str, str],
    db_url: str,
    secret_key: str,
    pem: bytes,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    add_senders(db_url, secret_key, pem)
    new_key = generate_key()
    path = tmp_path / "new.key"
    path.write_text(new_key + "\n")
    path.chmod(0o644)
    code, _, err = run(capsys, "keys", "rotate", "--new-key-file", str(path))
    assert code == 2 and "readable by its group or others" in err
    path.chmod(0o600)
    assert run(capsys, "keys", "rotate", "--new-key-file", str(path))[0] == 0
    assert SecretBox(new_key).decrypt(stored(db_url)["second"][0]) == PASSWORDS["second"]


@pytest.mark.parametrize(
    ("new_key", "message"),
    [
        (None, "environment variable MAILROOM_NEW_SECRET_KEY is not set"),
        ("not-a-key", "the new key is not a valid key"),
        ("current", "the new key is the current MAILROOM_SECRET_KEY"),
    ],
)
def test_rotation_refuses_a_missing_invalid_or_unchanged_new_key(
    cli_env: dict[str, str],
    db_url: str,
    secret_key: str,
    pem: bytes,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    new_key: str | None,
    message: str,
) -> None:
    add_senders(db_url, secret_key, pem)
    before = stored(db_url)
    monkeypatch.delenv("MAILROOM_NEW_SECRET_KEY", raising=False)
    if new_key is not None:
        monkeypatch.setenv("MAILROOM_NEW_SECRET_KEY", secret_key if new_key == "current" else new_key)
    code, _, err = run(capsys, "keys", "rotate")
    assert code == 2 and message in err
    assert stored(db_url) == before


def test_a_mailroom_key_file_is_given_the_new_key(
    cli_env: dict[str, str],
    db_url: str,
    tmp_path: Path,
    pem: bytes,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from worker.core.crypto import write_key_file

    key_path = Path(cli_env["MAILROOM_HOME"]) / "secret.key"
    old_key = write_key_file(key_path)
    monkeypatch.delenv("MAILROOM_SECRET_KEY")
    add_senders(db_url, old_key, pem)
    new_key = generate_key()
    monkeypatch.setenv("MAILROOM_NEW_SECRET_KEY", new_key)
    code, out, _ = run(capsys, "keys", "rotate")
    assert code == 0 and f"{key_path} now holds the new key" in out
    assert key_path.read_text().strip() == new_key
    assert key_path.stat().st_mode & 0o777 == 0o600
    assert SecretBox(new_key).decrypt(stored(db_url)["first"][0]) == PASSWORDS["first"]


def test_a_rotation_rolled_back_leaves_the_old_key_in_force_and_no_audit_row(
    db_url: str, secret_key: str, pem: bytes
) -> None:
    from worker.ops.keys import rotate_secrets

    add_senders(db_url, secret_key, pem)
    before = stored(db_url)
    audited = len(audit_rows(db_url))
    new_key = generate_key()
    with psycopg.connect(db_url) as conn:
        rotation = rotate_secrets(conn, SecretBox(secret_key), SecretBox(new_key), new_key, actor="alice")
        assert rotation.secrets == 3
        conn.rollback()
    assert stored(db_url) == before
    assert len(audit_rows(db_url)) == audited


def test_keys_rotate_help_says_where_the_new_key_comes_from_with_an_example(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["keys", "rotate", "--help"]) == 0
    out = capsys.readouterr().out
    assert "never goes on the command line" in out and "--new-key-file" in out
    assert 'export MAILROOM_NEW_SECRET_KEY="$(mailroom keys generate)"' in out


def test_keys_generate_prints_a_new_usable_key_each_time(capsys: pytest.CaptureFixture[str]) -> None:
    code, first, err = run(capsys, "keys", "generate")
    assert code == 0 and err == ""
    box = SecretBox(first.strip())
    assert box.decrypt(box.encrypt("x")) == "x"
    assert run(capsys, "keys", "generate")[1] != first


def test_keygen_still_works_and_names_its_new_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "keygen")
    box = SecretBox(out.strip())
    assert code == 0 and box.decrypt(box.encrypt("x")) == "x"
    assert "mailroom keys generate" in err


def test_the_new_key_comes_from_a_variable_or_a_file_not_both(
    cli_env: dict[str, str], db_url: str, secret_key: str, pem: bytes, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    add_senders(db_url, secret_key, pem)
    before = stored(db_url)
    path = tmp_path / "new.key"
    path.write_text(generate_key() + "\n")
    path.chmod(0o600)
    code, _, err = run(capsys, "keys", "rotate", "--new-key-env", "K", "--new-key-file", str(path))
    assert code == 2 and "--new-key-env and --new-key-file exclude each other" in err
    assert stored(db_url) == before
