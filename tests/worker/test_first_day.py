"""A first day without friction: what a new user meets, tried as they would, through the command line."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.cli import run
from tests.worker.helpers import add_sender, enqueue_many, run_until_drained, statuses
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.embedded import EmbeddedPostgres
from worker.devtools.sink import Drop, RunningSink


def test_drain_with_email_due_and_no_usable_sender_says_why_and_exits_1(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink, capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url, smtp_sink.port)
    add_sender(db_url, smtp_sink.port, name="backup")
    enqueue_many(db_url, 2)
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "UPDATE mailroom.sender_accounts SET status = 'suspended', status_reason = '535 5.7.8 bad login'"
            " WHERE name = 'primary'"
        )
        conn.execute("UPDATE mailroom.sender_accounts SET status = 'paused' WHERE name = 'backup'")

    code, _, err = run(capsys, "worker", "--drain", "--no-producers")

    assert code == 1
    assert "worker: sent 0 email(s)" in err
    assert (
        "2 emails are due and no sender can send them: backup paused; primary suspended (535 5.7.8 bad login)"
        in err
    )
    assert statuses(db_url) == {"pending": 2}


def test_drain_that_sends_everything_exits_0(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink, capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 2)

    code, _, err = run(capsys, "worker", "--drain", "--no-producers")

    assert (code, statuses(db_url)) == (0, {"sent": 2})
    assert "no sender can send" not in err


async def test_a_failed_login_on_every_connection_says_suspended_once(
    db_url: str,
    settings: Settings,
    smtp_sink_factory: Callable[..., RunningSink],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = smtp_sink_factory(auth=("mailer", "right-password"))
    add_sender(db_url, sink.port, username="mailer", password="wrong", settings=settings)
    enqueue_many(db_url, 8)

    with caplog.at_level(logging.INFO):
        await run_until_drained(db_url, settings, concurrency=4)

    said = [r.getMessage() for r in caplog.records if "suspended" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("sender account primary suspended: authentication failed: 535")


async def test_an_attempt_without_a_reply_is_logged_without_a_code_never_as_none(
    db_url: str, settings: Settings, smtp_sink: RunningSink, caplog: pytest.LogCaptureFixture
) -> None:
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_data("u0@example.com", Drop())
    enqueue_many(db_url, 1)

    with caplog.at_level(logging.WARNING):
        await run_until_drained(db_url, settings)

    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("email 1 to")]
    assert "None" not in line
    assert line.startswith("email 1 to u***@example.com: ") and line.endswith("(transient) -> retry")


def test_maintenance_with_nothing_to_do_says_nothing_at_info(
    db_url: str, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    from worker.ops.retention import run_maintenance

    with psycopg.connect(db_url, autocommit=True) as conn, caplog.at_level(logging.DEBUG):
        report = run_maintenance(conn, settings)

    assert report.steps and not report.errors
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [line for line in info if line.startswith("maintenance")], info
    # Still there for whoever asks for DEBUG.
    assert any("touched 0 row(s)" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


def _tour_sender(name: str) -> list[str]:
    """The tour's step 1, `senders add` with a login (without the DNS check: no network here)."""
    return [
        "senders", "add", name, "--from", "noreply@example.com", "--host", "smtp.example.com",
        "--port", "587", "--security", "starttls", "--username", "mailer", "--password-env",
        "SMTP_PASSWORD", "--no-dns-check",
    ]  # fmt: skip


def _mailroom(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("mailroom")
    return subprocess.run(
        [str(script), *argv], env=env, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.mark.e2e
def test_the_tours_first_step_in_a_fresh_home_makes_the_secret_key_once_and_says_so(
    tmp_path: Path, db_url: str, embedded_home: Path
) -> None:
    home = embedded_home  # the embedded server's user must reach it (tmp_path is 0700 under root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    env.update(MAILROOM_HOME=str(home), SMTP_PASSWORD="relay-secret")

    server = EmbeddedPostgres(home)  # held by the test too, so the two commands share one start
    try:
        url = server.start()
        first = _mailroom(_tour_sender("transactional-1"), env)
        second = _mailroom(_tour_sender("transactional-2"), env)
        with psycopg.connect(url) as conn:
            stored = conn.execute("SELECT smtp_password_encrypted FROM mailroom.sender_accounts").fetchall()
    finally:
        server.close()

    assert first.returncode == 0, first.stderr
    key_file = home / "secret.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert f"made a secret key in {key_file} (mode 0600)" in first.stderr
    assert second.returncode == 0 and "secret key" not in second.stderr, second.stderr
    box = SecretBox(key_file.read_text())
    assert [box.decrypt(row[0]) for row in stored] == ["relay-secret", "relay-secret"]
    # A deployment's database (MAILROOM_DATABASE_URL) is shared: no key is made, the command refuses.
    elsewhere = tmp_path / "deployed"
    refused = _mailroom(
        _tour_sender("transactional-3"),
        {**env, "MAILROOM_HOME": str(elsewhere), "MAILROOM_DATABASE_URL": db_url},
    )
    assert refused.returncode == 2 and "MAILROOM_SECRET_KEY is not set" in refused.stderr
    assert not (elsewhere / "secret.key").exists()
