"""`mailroom accounts ...` and `mailroom people ...` / `mailroom events upcoming`, in process, on a real database."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from tests.cli import run
from worker.cli.main import main

Conn = psycopg.Connection[dict[str, Any]]


def test_accounts_commands_walk_the_lifecycle(
    cli_env: dict[str, str], conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "accounts", "create", "ada@example.com", "ada", "--locale", "fr")
    assert code == 0 and re.match(r"created account \d+ \(ada\), provisioned", out)
    code, _, err = run(capsys, "accounts", "create", "ada@example.com", "other")
    assert code == 2 and "error: email: an account with this email already exists" in err

    token = conn.execute("SELECT code, secret FROM mailroom.tokens").fetchone()
    assert token is not None
    conn.rollback()
    code, _, err = run(capsys, "accounts", "activate", "--code", "12345")
    assert code == 2 and "--code needs --email" in err
    code, _, err = run(capsys, "accounts", "recover", "ada")
    assert code == 2 and "is provisioned: only active accounts recover" in err
    code, out, _ = run(capsys, "accounts", "activate", "--code", token["code"], "--email", "ada@example.com")
    assert code == 0 and out.endswith("is active\n")
    code, _, err = run(capsys, "accounts", "activate", "--secret", token["secret"].hex())
    assert code == 2 and "already used" in err

    code, out, _ = run(capsys, "accounts", "recover", "ada@example.com")
    assert code == 0 and "password recovery token" in out
    code, _, err = run(capsys, "accounts", "suspend", "ada", "nobody")
    assert code == 2 and "no account with email or login 'nobody'" in err  # nothing suspended
    code, out, _ = run(capsys, "accounts", "suspend", "ada")
    assert (code, out) == (0, "suspended 1 account(s)\n")
    code, out, _ = run(capsys, "accounts", "list", "--status", "suspended", "--json")
    assert code == 0 and [a["login"] for a in json.loads(out)] == ["ada"]
    code, out, _ = run(capsys, "accounts", "unsuspend", "ada")
    assert code == 0 and out == "unsuspended 1 account(s)\n"
    code, out, _ = run(capsys, "accounts", "resend", "ada")
    assert code == 1 and "left 1 alone" in out and "is active" in out
    code, out, _ = run(capsys, "accounts", "list")
    assert code == 0 and "active" in out and "ada@example.com" in out


def test_people_and_events_commands(
    cli_env: dict[str, str], conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "people", "add", "ada@example.com", "Ada", "L", "--born", "1990-06-15", "--tz", "Mars/Base"
    )
    assert code == 2 and "unknown time zone 'Mars/Base'" in err
    code, out, _ = run(
        capsys,
        "people",
        "add",
        "ada@example.com",
        "Ada",
        "L",
        "--born",
        "1990-06-15",
        "--tz",
        "Asia/Kathmandu",
    )
    assert code == 0 and "next birthday email" in out and "09:00 Asia/Kathmandu" in out
    person_id = out.split(":")[0]
    code, out, _ = run(capsys, "people", "update", person_id, "--tz", "Europe/London", "--version", "1")
    assert code == 0 and "(version 2)" in out and "09:00 Europe/London" in out
    code, _, err = run(capsys, "people", "update", person_id, "--tz", "UTC", "--version", "1")
    assert code == 2 and "someone changed it" in err
    code, out, _ = run(capsys, "people", "list", "--json")
    assert code == 0 and [p["time_zone"] for p in json.loads(out)] == ["Europe/London"]
    code, out, err = run(capsys, "events", "upcoming", "--hours", str(24 * 366), "--json")
    assert code == 0 and [e["time_zone"] for e in json.loads(out)] == ["Europe/London"]
    code, out, err = run(capsys, "events", "upcoming", "--hours", "0.001")
    assert code == 0 and "0 event(s) due within 0.001 hour(s)" in err
    code, out, _ = run(capsys, "people", "delete", person_id)
    assert code == 0
    assert conn.execute("SELECT count(*) AS n FROM mailroom.events").fetchone() == {"n": 0}


def test_wrong_codes_through_the_cli_stay_counted_and_lock_the_token(
    cli_env: dict[str, str], conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI rolls back on every error: the count survives only because consuming commits its outcome.
    assert run(capsys, "accounts", "create", "ada@example.com", "ada")[0] == 0
    token = conn.execute("SELECT code FROM mailroom.tokens").fetchone()
    assert token is not None
    conn.rollback()
    for n in range(1, 6):
        guess = f"{(int(token['code']) + n) % 100000:05d}"
        code, _, err = run(capsys, "accounts", "activate", "--code", guess, "--email", "ada@example.com")
        assert code == 2 and err.startswith("error: token: ")
    code, _, err = run(capsys, "accounts", "activate", "--code", token["code"], "--email", "ada@example.com")
    assert code == 2 and "locked after 5 wrong codes; ask for a new one" in err
    assert conn.execute("SELECT status FROM mailroom.accounts").fetchone() == {"status": "provisioned"}
    assert conn.execute("SELECT failed_attempts FROM mailroom.tokens").fetchone() == {"failed_attempts": 5}


def test_an_account_is_found_by_its_email_before_another_ones_login(
    cli_env: dict[str, str], conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    # Bob's login is Ada's address: `suspend ada@example.com` means Ada, whoever was created first.
    assert run(capsys, "accounts", "create", "bob@example.com", "ada@example.com")[0] == 0
    assert run(capsys, "accounts", "create", "ada@example.com", "ada")[0] == 0
    assert run(capsys, "accounts", "suspend", "ada@example.com")[0] == 0
    rows = conn.execute("SELECT login, status FROM mailroom.accounts ORDER BY id").fetchall()
    assert rows == [
        {"login": "ada@example.com", "status": "provisioned"},
        {"login": "ada", "status": "suspended"},
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("accounts", "list", "--limit", "-1"), "-1 is not in the range x>=1"),
        (("people", "list", "--limit", "0"), "0 is not in the range x>=1"),
        (("events", "upcoming", "--hours", "inf"), "'inf' is not a number of hours above 0"),
        (("events", "upcoming", "--hours", "nan"), "'nan' is not a number of hours above 0"),
        (("events", "upcoming", "--hours", "-2"), "'-2' is not a number of hours above 0"),
    ],
)
def test_bad_limits_and_hours_are_usage_errors_not_tracebacks(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    assert main(list(argv)) == 2
    assert message in capsys.readouterr().err
