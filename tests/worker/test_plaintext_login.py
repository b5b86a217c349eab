"""A login over a connection without TLS is refused unless the operator allowed it: by the CLI and by the worker."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.cli import not_on_terminal, run
from tests.worker.helpers import enqueue_many, run_until_drained, statuses
from worker.cli.main import main
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.devtools.sink import start_sink
from worker.devtools.sink_handler import SinkHandler

REMOTE = ["senders", "add", "relay", "--from", "noreply@example.com", "--host", "smtp.example.com"]
CLEAR = ["--port", "25", "--security", "none", "--username", "mailer", "--password-env", "SMTP_PASSWORD"]


@pytest.fixture
def password_env(cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("SMTP_PASSWORD", "relay-secret")
    not_on_terminal(monkeypatch)
    return cli_env


def _senders(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    conn.rollback()
    return conn.execute("SELECT name, allow_plaintext_login FROM mailroom.sender_accounts").fetchall()


def test_senders_add_refuses_a_password_login_without_tls_and_stores_nothing(
    password_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *REMOTE, *CLEAR)
    assert code == 2
    assert "readable by anyone on the network path" in err and "--allow-plaintext-login" in err
    assert _senders(conn) == []


def test_senders_add_refuses_an_oauth2_login_without_tls(
    password_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLIENT_SECRET", "cs")
    monkeypatch.setenv("REFRESH_TOKEN", "rt")
    oauth = ["--auth", "oauth2", "--oauth-provider", "google", "--oauth-client-id", "1234.apps"]
    secrets = ["--oauth-client-secret-env", "CLIENT_SECRET", "--oauth-refresh-token-env", "REFRESH_TOKEN"]
    code, _, err = run(capsys, *REMOTE, "--port", "25", "--security", "none", *oauth, *secrets)
    assert code == 2 and "--allow-plaintext-login" in err
    assert _senders(conn) == []


def test_allow_plaintext_login_stores_the_choice_and_warns_each_time(
    password_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *REMOTE, *CLEAR, "--allow-plaintext-login")
    assert code == 0, err
    assert "the login to smtp.example.com crosses the network unencrypted" in err
    assert _senders(conn) == [{"name": "relay", "allow_plaintext_login": True}]
    code, out, err = run(capsys, "senders", "edit", "relay", "--daily-limit", "10")  # the flag left out: kept
    assert code == 0 and out.strip().endswith("changed daily_limit"), err
    assert _senders(conn) == [{"name": "relay", "allow_plaintext_login": True}]
    code, _, err = run(capsys, "senders", "edit", "relay", "--no-allow-plaintext-login")
    assert code == 2 and "--allow-plaintext-login" in err  # taking it back while logging in clear: refused
    assert (
        run(capsys, "senders", "edit", "relay", "--security", "starttls", "--no-allow-plaintext-login")[0]
        == 0
    )
    assert _senders(conn) == [{"name": "relay", "allow_plaintext_login": False}]


def test_a_login_to_the_loopback_interface_needs_no_flag(
    password_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    local = ["senders", "add", "local", "--from", "noreply@example.com", "--host", "127.0.0.1"]
    code, _, err = run(capsys, *local, *CLEAR)
    assert code == 0, err
    assert "crosses the network" not in err


def test_the_flags_help_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("add", "edit"):
        assert main(["senders", action, "--help"]) == 0
        help_text = " ".join(capsys.readouterr().out.split())
        assert "--allow-plaintext-login" in help_text
        assert "crosses the network readable by anyone on the path" in help_text


class _Listening(SinkHandler):
    """The sink, also keeping every password an AUTH command carried to it (what a wiretap would see)."""

    def __init__(self, auth: tuple[str, str]) -> None:
        super().__init__(auth=auth)
        self.heard: list[bytes] = []

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> Any:
        self.heard.append(bytes(getattr(auth_data, "password", b"")))
        return super().authenticate(server, session, envelope, mechanism, auth_data)


async def test_the_worker_refuses_to_send_a_password_in_clear_for_a_row_written_around_the_cli(
    db_url: str, settings: Settings
) -> None:
    handler = _Listening(auth=("mailer", "relay-secret"))
    # 127.0.0.2: the loopback network, but not a name the rule exempts; the server offers AUTH without STARTTLS.
    with start_sink("127.0.0.2", 0, handler=handler) as sink, psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security,"
            " smtp_username, smtp_password_encrypted) VALUES ('raw', 'noreply@example.org', '127.0.0.2', %s,"
            " 'none', 'mailer', %s)",
            (sink.port, SecretBox(settings.secret_key or "").encrypt("relay-secret")),
        )
        conn.commit()
        enqueue_many(db_url, 2)
        fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05)
        assert await run_until_drained(db_url, fast) == 0
        assert handler.heard == []  # not a byte of the password left the worker
        row = conn.execute("SELECT status, status_reason FROM mailroom.sender_accounts").fetchone()
        assert row is not None and row[0] == "suspended" and "without TLS" in row[1]
        assert statuses(db_url) == {"pending": 2}
        # Allowed knowingly (what --allow-plaintext-login stores), the same row logs in and sends.
        conn.execute(
            "UPDATE mailroom.sender_accounts SET (allow_plaintext_login, status, status_reason) ="
            " (true, 'active', NULL)"
        )
        conn.commit()
        assert await run_until_drained(db_url, fast) == 2
        assert handler.heard == [b"relay-secret"]
