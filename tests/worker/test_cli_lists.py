"""List commands print addresses whole, and a sender account's state is the one it has now."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.cli import run


def add_sender(capsys: pytest.CaptureFixture[str], *extra: str, name: str = "relay") -> None:
    # No DNS check: these domains are not reserved, and the test machine's resolver is not ours.
    argv = [
        "senders",
        "add",
        name,
        "--port",
        "2525",
        "--security",
        "none",
        "--host",
        "127.0.0.1",
        "--no-dns-check",
    ]
    code, _, err = run(capsys, *argv, *extra)
    assert code == 0, err


def listed(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, _ = run(capsys, "senders", "list", "--json")
    assert code == 0
    return {row["name"]: row for row in json.loads(out)}


def test_an_account_paused_at_yesterdays_limit_lists_as_sending_again(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(capsys, "--from", "a@example.com", "--daily-limit", "40")
    conn.execute(
        "UPDATE mailroom.sender_accounts SET status = 'paused_limit_reached',"
        " limit_reached_on = (now() AT TIME ZONE 'UTC')::date - 1, status_reason = 'daily limit of 40 reached'"
    )
    conn.commit()
    row = listed(capsys)["relay"]
    assert (row["status"], row["status_reason"]) == ("active", None)
    table = run(capsys, "senders", "list")[1].splitlines()
    assert table[1].split()[:2] == ["relay", "active"]
    stats = json.loads(run(capsys, "stats", "--json")[1])
    assert stats["senders"][0]["status"] == "active"


def test_a_resumed_account_at_todays_limit_shows_it_and_a_raised_limit_frees_it(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    add_sender(capsys, "--from", "a@example.com", "--daily-limit", "2")
    conn.execute(
        "INSERT INTO mailroom.sender_usage (sender_account_id, day, sent)"
        " SELECT id, (now() AT TIME ZONE 'UTC')::date, 2 FROM mailroom.sender_accounts"
    )
    conn.commit()
    assert run(capsys, "senders", "pause", "relay")[0] == 0
    code, out, _ = run(capsys, "senders", "resume", "relay")
    assert code == 0 and out.strip().endswith("is now paused_limit_reached")
    row = listed(capsys)["relay"]
    assert (row["status"], row["status_reason"]) == ("paused_limit_reached", "daily limit of 2 reached")
    code, _, err = run(capsys, "senders", "resume", "relay")
    assert code == 1 and "at its daily limit (2/2 sent today)" in err and "--daily-limit" in err
    code, out, err = run(capsys, "senders", "edit", "relay", "--daily-limit", "10")
    assert code == 0 and "active" in out, err
    row = listed(capsys)["relay"]
    assert (row["status"], row["status_reason"], row["effective_limit"]) == ("active", None, 10)
    stored = conn.execute("SELECT status, limit_reached_on FROM mailroom.sender_accounts").fetchone()
    assert stored == {"status": "active", "limit_reached_on": None}


def test_senders_list_prints_from_addresses_and_hosts_whole(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    address = "transactional-notifications-no-reply@mail.eu-west.example-company.com"
    add_sender(capsys, "--from", address)
    add_sender(capsys, "--from", "b@example.com", name="a-much-longer-sender-account-name")
    lines = run(capsys, "senders", "list")[1].splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "TODAY", "WARM-UP", "FROM", "STREAMS", "HOST", "AUTH"]
    assert any(address in line and "127.0.0.1:2525" in line for line in lines)
    assert any(line.startswith("a-much-longer-sender-account-name  ") for line in lines)
    # columns line up: every row's FROM starts where the header's does
    start = lines[0].index("FROM")
    assert all(line[start:].split()[0] in (address, "b@example.com") for line in lines[1:])


def test_accounts_list_prints_logins_and_addresses_whole(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    address = "firstname.middlename.lastname@department.example-university.ac.uk"
    login = "firstname-middlename-lastname-2026"
    assert run(capsys, "accounts", "create", address, login)[0] == 0
    code, out, _ = run(capsys, "accounts", "list")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["ID", "STATUS", "LOGIN", "CHANGED", "EMAIL"]
    assert login in row.split() and row.endswith(address)
