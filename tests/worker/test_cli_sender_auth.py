"""`mailroom senders add|edit|list` for OAuth2 logins, bounce domains and relay providers, run in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.cli import not_on_terminal, run
from tests.worker.senders import audit_rows, sender
from worker.core.crypto import SecretBox
from worker.core.sender_settings import GOOGLE_ENDPOINT

GMAIL = [
    "senders", "add", "gmail", "--from", "me@example.com", "--host", "smtp.gmail.com", "--port", "587",
    "--security", "starttls", "--auth", "oauth2", "--oauth-client-id", "1234.apps.googleusercontent.com",
]  # fmt: skip
SECRETS = ["--oauth-client-secret-env", "CLIENT_SECRET", "--oauth-refresh-token-env", "REFRESH_TOKEN"]


@pytest.fixture
def oauth_env(cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("CLIENT_SECRET", "cs-from-env-77")
    monkeypatch.setenv("REFRESH_TOKEN", "rt-from-env-88")
    not_on_terminal(monkeypatch)
    return cli_env


def _count(conn: psycopg.Connection[Any]) -> int:
    conn.rollback()
    row = conn.execute("SELECT count(*) AS n FROM mailroom.sender_accounts").fetchone()
    assert row is not None
    return int(row["n"])


def test_add_an_oauth2_sender_with_the_google_preset_and_list_it_without_secrets(
    oauth_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *GMAIL, "--oauth-provider", "google", *SECRETS)
    assert code == 0, err
    assert "logging in as the From address me@example.com" in err
    assert "no password" not in err  # an oauth2 sender needs none
    row = sender(conn, "gmail")
    assert (row["auth_type"], row["oauth_token_url"], row["smtp_username"]) == (
        "oauth2",
        GOOGLE_ENDPOINT,
        "me@example.com",
    )
    box = SecretBox(oauth_env["MAILROOM_SECRET_KEY"])
    assert box.decrypt(row["oauth_client_secret_encrypted"]) == "cs-from-env-77"
    assert box.decrypt(row["oauth_refresh_token_encrypted"]) == "rt-from-env-88"
    assert row["smtp_password_encrypted"] is None
    code, out, _ = run(capsys, "senders", "list", "--json")
    listed = json.loads(out)[0]
    assert (listed["auth_type"], listed["oauth_client_id"]) == ("oauth2", "1234.apps.googleusercontent.com")
    code, table, _ = run(capsys, "senders", "list")
    assert table.splitlines()[0].split()[-1] == "AUTH" and table.splitlines()[1].split()[-1] == "oauth2"
    for shown in (out, table, json.dumps(audit_rows(conn, "sender.add"), default=str)):
        assert "cs-from-env-77" not in shown and "rt-from-env-88" not in shown


def test_the_microsoft_preset_takes_a_tenant(
    oauth_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*GMAIL, "--username", "box@contoso.com", "--oauth-provider", "microsoft"]
    code, _, err = run(capsys, *argv, "--oauth-tenant", "contoso.onmicrosoft.com", *SECRETS)
    assert code == 0, err
    row = sender(conn, "gmail")
    assert (
        row["oauth_token_url"]
        == "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token"
    )
    assert row["smtp_username"] == "box@contoso.com"


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--oauth-provider", "google", *SECRETS[2:]], "--oauth-client-secret-env"),
        (["--oauth-provider", "google", *SECRETS[:2]], "--oauth-refresh-token-env"),
        ([*SECRETS], "--oauth-provider google|microsoft or --oauth-token-url"),
        (["--oauth-token-url", "http://auth.example.com/token", *SECRETS], "https://"),
        (["--oauth-provider", "google", "--oauth-tenant", "x", *SECRETS], "--oauth-tenant goes with"),
        (["--oauth-provider", "google", "--password-env", "CLIENT_SECRET", *SECRETS], "not a password"),
    ],
    ids=["no-secret", "no-refresh-token", "no-endpoint", "plain-http", "tenant-for-google", "password"],
)
def test_an_incomplete_oauth2_sender_is_refused_and_nothing_is_added(
    oauth_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    said: str,
) -> None:
    code, _, err = run(capsys, *GMAIL, *extra)
    assert code == 2 and said in err, err
    assert _count(conn) == 0


def test_an_oauth2_sender_without_a_client_id_is_refused(
    oauth_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a for a in GMAIL if a not in ("--oauth-client-id", "1234.apps.googleusercontent.com")]
    code, _, err = run(capsys, *argv, "--oauth-provider", "google", *SECRETS)
    assert code == 2 and "--oauth-client-id" in err
    assert _count(conn) == 0


def test_a_secret_on_the_command_line_is_refused(
    oauth_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *GMAIL, "--oauth-provider", "google", "--oauth-client-secret", "visible-in-ps")
    assert code == 2 and "--oauth-client-secret-env VAR" in err
    assert _count(conn) == 0


def test_edit_replaces_the_refresh_token_switches_back_to_a_password_and_audits_no_secret(
    oauth_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run(capsys, *GMAIL, "--oauth-provider", "google", *SECRETS)[0] == 0
    box = SecretBox(oauth_env["MAILROOM_SECRET_KEY"])
    token_file = tmp_path / "refresh"
    token_file.write_text("rt-new-from-file\n")
    code, out, err = run(capsys, "senders", "edit", "gmail", "--oauth-refresh-token-file", str(token_file))
    assert code == 0 and "oauth_refresh_token" in out, err
    row = sender(conn, "gmail")
    assert box.decrypt(row["oauth_refresh_token_encrypted"]) == "rt-new-from-file"
    assert box.decrypt(row["oauth_client_secret_encrypted"]) == "cs-from-env-77"
    monkeypatch.setenv("SMTP_PASSWORD", "app-password-5")
    code, _, err = run(
        capsys, "senders", "edit", "gmail", "--auth", "password", "--password-env", "SMTP_PASSWORD"
    )
    assert code == 0, err
    row = sender(conn, "gmail")
    assert (row["auth_type"], row["oauth_token_url"], row["oauth_client_id"]) == ("password", None, None)
    assert row["oauth_client_secret_encrypted"] is None and row["oauth_refresh_token_encrypted"] is None
    assert box.decrypt(row["smtp_password_encrypted"]) == "app-password-5"
    details = [r["detail"] for r in audit_rows(conn, "sender.edit")]
    assert details[0]["oauth_refresh_token"] is True and details[0]["oauth_client_secret"] is False
    assert details[1]["changed"]["auth_type"] == ["oauth2", "password"] and details[1]["password"] is True
    for secret in ("rt-new-from-file", "cs-from-env-77", "app-password-5"):
        assert secret not in json.dumps(details)


def test_edit_to_oauth2_needs_every_oauth2_setting_and_changes_nothing_without(
    oauth_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["senders", "add", "relay", "--from", "a@example.com", "--host", "127.0.0.1", "--port", "2525"]
    assert run(capsys, *argv, "--security", "none")[0] == 0
    before = sender(conn)
    edit = ["senders", "edit", "relay", "--auth", "oauth2", "--username", "a@example.com"]
    code, _, err = run(
        capsys, *edit, "--oauth-provider", "google", "--oauth-client-id", "c", SECRETS[0], SECRETS[1]
    )
    assert code == 2 and "refresh token" in err
    assert sender(conn) == before
    code, _, err = run(capsys, *edit, "--oauth-provider", "google", "--oauth-client-id", "c", *SECRETS)
    assert code == 0, err
    assert sender(conn)["auth_type"] == "oauth2"


def test_bounce_domain_and_relay_provider_are_set_shown_and_cleared(
    oauth_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["senders", "add", "relay", "--from", "a@example.com", "--host", "127.0.0.1", "--port", "2525"]
    code, _, err = run(capsys, *argv, "--security", "none", "--bounce-domain", "Bounces.Example.COM.")
    assert code == 0, err
    code, _, err = run(capsys, "senders", "edit", "relay", "--relay-provider", "postmark")
    assert code == 0, err
    row = sender(conn)
    assert (row["bounce_domain"], row["relay_provider"]) == ("bounces.example.com", "postmark")
    table = run(capsys, "senders", "list")[1]
    assert "  bounce domain bounces.example.com, tagged for postmark" in table.splitlines()
    code, _, err = run(capsys, "senders", "edit", "relay", "--bounce-domain", "not a domain")
    assert code == 2 and "bounce_domain" in err
    assert run(capsys, "senders", "edit", "relay", "--no-bounce-domain")[0] == 0
    assert run(capsys, "senders", "edit", "relay", "--relay-provider", "none")[0] == 0
    row = sender(conn)
    assert (row["bounce_domain"], row["relay_provider"]) == (None, None)
    assert run(capsys, "senders", "edit", "relay", "--bounce-domain", "b.example.org")[0] == 0
    assert run(capsys, "senders", "edit", "relay", "--bounce-domain", "")[0] == 0
    assert sender(conn)["bounce_domain"] is None


def test_editing_an_oauth2_senders_username_on_a_terminal_asks_for_no_password(
    oauth_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, a terminal offered the SMTP password prompt here, and a password typed was then refused."""
    from tests.cli import on_terminal

    assert run(capsys, *GMAIL, "--oauth-provider", "google", *SECRETS)[0] == 0
    on_terminal(monkeypatch, "", password="typed-by-mistake")
    code, _out, err = run(capsys, "senders", "edit", "gmail", "--username", "other@example.com")
    assert code == 0, err
    row = sender(conn, "gmail")
    assert (row["smtp_username"], row["smtp_password_encrypted"]) == ("other@example.com", None)


def test_the_token_endpoint_is_a_preset_or_a_url_not_both(
    oauth_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = ["--oauth-provider", "google", "--oauth-token-url", "https://auth.example.com/token"]
    code, _, err = run(capsys, *GMAIL, *endpoint, *SECRETS)
    assert code == 2 and "--oauth-provider and --oauth-token-url exclude each other" in err
    assert _count(conn) == 0


def test_the_command_offers_the_providers_the_settings_accept() -> None:
    """The command spells the choices itself (its module loads without the validation); they must agree."""
    from worker.cli.commands import sender_oauth
    from worker.core import sender_settings

    assert sender_oauth.PROVIDERS == sender_settings.PROVIDERS
    assert sender_oauth.RELAY_PROVIDERS == sender_settings.RELAY_PROVIDERS
    assert sender_oauth.AUTH_TYPES == sender_settings.AUTH_TYPES
