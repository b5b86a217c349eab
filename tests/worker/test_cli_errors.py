"""Every operational failure is one line on stderr naming the problem and the fix, with a documented exit status."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from worker.core.db import upgrade


def _mailroom(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("mailroom")
    return subprocess.run(
        [str(script), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.e2e
def test_an_unreachable_database_is_one_line_and_exit_3(cli_env: dict[str, str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    env = {**cli_env, "MAILROOM_DATABASE_URL": f"postgresql://mailroom@127.0.0.1:{port}/mailroom"}
    for command in (["stats"], ["senders", "list"], ["worker", "--drain"], ["retry", "1"]):
        done = _mailroom(command, env)
        assert done.returncode == 3, done.stderr
        assert "cannot reach the database" in _one_line(done) and "MAILROOM_DATABASE_URL" in done.stderr


@pytest.mark.e2e
def test_a_database_without_the_schema_says_to_upgrade_and_exit_4(
    cli_env: dict[str, str], empty_db_url: str
) -> None:
    done = _mailroom(["stats"], {**cli_env, "MAILROOM_DATABASE_URL": empty_db_url})
    assert done.returncode == 4
    assert "run: mailroom db upgrade" in _one_line(done)


@pytest.mark.e2e
def test_a_schema_newer_than_the_code_says_to_upgrade_mailroom(
    cli_env: dict[str, str], empty_db_url: str
) -> None:
    upgrade(empty_db_url)
    with psycopg.connect(empty_db_url) as conn:
        conn.execute("UPDATE mailroom.alembic_version SET version_num = '0099'")
    done = _mailroom(["worker", "--drain"], {**cli_env, "MAILROOM_DATABASE_URL": empty_db_url})
    assert done.returncode == 4
    assert "newer than this Mailroom" in _one_line(done)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({"MAILROOM_LEASE_SECONDS": "soon"}, ["stats"], "MAILROOM_LEASE_SECONDS must be a number"),
        ({}, ["senders", "add", "a", "--from", "a@example.com", "--host", "h", "--port", "587",
              "--security", "starttls", "--username", "u", "--password-env", "NO_SUCH_VARIABLE"], "NO_SUCH_VARIABLE"),
        # A login is a secret to store: it needs the key (a relay without one does not).
        ({"MAILROOM_SECRET_KEY": "", "SMTP_PASS": "p"}, ["senders", "add", "a", "--from", "a@example.com",
                                       "--host", "h", "--port", "587", "--security", "starttls", "--username",
                                       "u", "--password-env", "SMTP_PASS"], "MAILROOM_SECRET_KEY is not set"),
    ],
)  # fmt: skip
def test_bad_settings_are_one_line_and_exit_2(
    cli_env: dict[str, str], env: dict[str, str], args: list[str], expected: str
) -> None:
    done = _mailroom(args, {**cli_env, **env})
    assert done.returncode == 2
    assert expected in _one_line(done)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["sink", "--port", "{port}"], "--port"),
        (
            ["bounces", "receive", "--domain", "bounces.example.com", "--listen", "127.0.0.1:{port}"],
            "--listen",
        ),
    ],
)
def test_a_port_in_use_is_one_line_and_exit_2_naming_the_commands_option(
    cli_env: dict[str, str], args: list[str], option: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = _mailroom([a.replace("{port}", port) for a in args], cli_env)
    assert done.returncode == 2
    # bounces receive has no --port: the advice names the option the command has.
    assert "already in use" in _one_line(done)
    assert f"choose another {option}" in _one_line(done)


@pytest.mark.e2e
def test_verbose_adds_the_traceback(cli_env: dict[str, str], empty_db_url: str) -> None:
    done = _mailroom(["-v", "stats"], {**cli_env, "MAILROOM_DATABASE_URL": empty_db_url})
    assert done.returncode == 4
    assert "Traceback" in done.stderr


@pytest.mark.e2e
def test_senders_add_refuses_a_login_without_password_and_warns_of_doubtful_choices(
    cli_env: dict[str, str],
) -> None:
    base = ["senders", "add", "relay", "--from", "noreply@example.com", "--host", "smtp.example.com"]
    refused = _mailroom([*base, "--port", "587", "--security", "starttls", "--username", "mailer"], cli_env)
    assert refused.returncode == 2 and "--username needs a password" in _one_line(refused)
    added = _mailroom([*base, "--security", "none"], cli_env)
    assert added.returncode == 0, added.stderr
    assert "no --port given: using 587" in added.stderr
    assert "crosses the network unencrypted" in added.stderr
    assert "no password" in added.stderr


def test_a_read_only_database_says_to_point_at_the_primary_and_exit_3(
    db_url: str, capsys: pytest.CaptureFixture[str], cli_env: dict[str, str]
) -> None:
    from tests.cli import run

    # A standby, or a primary demoted in a failover: it answers, and refuses every write.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET default_transaction_read_only = on')
    code, _, err = run(capsys, "suppressions", "add", "someone@example.com", "--reason", "asked")
    assert code == 3, err
    line = next(line for line in err.splitlines() if line.startswith("error: "))
    assert "the database takes no writes (cannot execute INSERT in a read-only transaction)" in line, line
    assert "target_session_attrs=read-write" in line
