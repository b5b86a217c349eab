"""Who may hold the audit trail's chain head, played as applications and operators through the command line.

An application's audit row (mailroom.app_audit) takes no lock: it waits in mailroom.audit_pending until the
next audit write or maintenance chains it, so a tenant that leaves its transaction open holds no operator's
command and no other tenant. Whoever else holds the head (an operator's open transaction) is waited for a
few seconds at most, and named.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.cli import run
from tests.fixtures_db import drop_roles, role_url
from tests.worker.helpers import add_sender
from worker.ops import audit_chain

# The escape sequence clears a terminal: printed raw, the operator would see a blank screen.
HOLDER = "mr_head_night\x1b[2Jshift"
LATE = "mr_head_late"  # a role granted while an application keeps its audit row open


pytestmark = pytest.mark.usefixtures("role_lock")


def _as(db_url: str, role: str, *, autocommit: bool = False, **more: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(make_conninfo(role_url(db_url, role), **more), autocommit=autocommit)


def verify(capsys: pytest.CaptureFixture[str]) -> tuple[int, str, dict[str, Any]]:
    """`mailroom audit verify`: exit status, its summary and its --json report."""
    code, out, _ = run(capsys, "audit", "verify")
    _, json_out, _ = run(capsys, "audit", "verify", "--json")
    return code, out, json.loads(json_out)


@pytest.fixture
def apps(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[str, str]]:
    """Two application roles, made as an operator makes them: `mailroom db grant app NAME --create`."""
    names = ("mr_head_shop", "mr_head_blog")
    for name in names:
        code, _, err = run(capsys, "db", "grant", "app", name, "--create")
        assert code == 0, err
    yield names
    drop_roles(db_url, *names, LATE)


@pytest.fixture
def holder(db_url: str) -> Iterator[str]:
    """An operator's role that writes audit rows itself (as psql would), with a name that is a terminal escape."""
    with psycopg.connect(db_url) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(HOLDER)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA mailroom TO {}").format(sql.Identifier(HOLDER)))
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT ON mailroom.audit_log TO {}").format(sql.Identifier(HOLDER))
        )
    yield HOLDER
    drop_roles(db_url, HOLDER)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_an_application_keeping_its_audit_row_open_holds_no_operator_and_no_other_application(
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    apps: tuple[str, str],
    ending: str,
) -> None:
    shop, blog = apps
    add_sender(db_url, 2525)
    # The operator's commands would wait for ever on a held head; 3 s, and they fail instead.
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=3s")
    with _as(db_url, shop) as app:  # its transaction stays open through what follows
        shop_row = app.execute("SELECT mailroom.app_audit('app.refund', 'billing', 'order 42')").fetchone()
        assert shop_row is not None
        code, _, err = run(capsys, "suppressions", "add", "ada@example.com", "--reason", "legal request")
        assert code == 0, err
        code, _, err = run(capsys, "senders", "pause", "primary", "--reason", "relay incident")
        assert code == 0, err
        code, _, err = run(capsys, "db", "grant", "read-only", LATE, "--create")
        assert code == 0, err
        with _as(db_url, blog, autocommit=True) as other:
            other.execute("SET lock_timeout = 0")  # its own setting: it would wait for ever
            blog_row = other.execute("SELECT mailroom.app_audit('app.note', 'shipping')").fetchone()
        assert blog_row is not None
        if ending == "commit":
            app.commit()
        else:
            app.rollback()

    waiting = [blog_row[0]] + ([shop_row[0]] if ending == "commit" else [])
    code, out, report = verify(capsys)
    assert code == 0, out
    assert report["pending"] == len(waiting), report
    assert f"{len(waiting)} application row(s) waiting to be chained" in out
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert audit_chain.link_pending(conn) == len(waiting)  # as maintenance does
        chained = conn.execute(
            "SELECT id, db_role, action FROM mailroom.audit_log WHERE action LIKE 'app.%' ORDER BY seq"
        ).fetchall()
    code, out, report = verify(capsys)
    assert code == 0 and report["pending"] == 0, out
    expected = {blog_row[0]: (blog, "app.note")} | (
        {shop_row[0]: (shop, "app.refund")} if ending == "commit" else {}
    )
    assert {i: (role, action) for i, role, action in chained} == expected


def test_an_operators_command_waits_for_the_head_a_few_seconds_then_names_who_holds_it(
    db_url: str,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    holder: str,
) -> None:
    add_sender(db_url, 2525)
    # Far longer than the bound the database sets (5 s): without it, the command would wait a minute and
    # fail with a bare lock timeout that names nobody (no clock needed to tell the two apart).
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=60s")
    with _as(db_url, holder, application_name="night shift") as ops:
        ops.execute("SELECT mailroom.audit('ops.note', 'night shift')")  # and the transaction stays open
        code, _, err = run(capsys, "senders", "pause", "primary")
        pid = ops.info.backend_pid
        ops.rollback()
    assert code == 1, err
    assert "the audit trail is held by another session's open transaction" in err, err
    assert f"pid {pid} (role mr_head_night\\x1b[2Jshift, application night shift, idle in transaction" in err
    assert "\x1b" not in err  # escaped, never sent to the terminal
    with psycopg.connect(db_url) as conn:  # the pause went with its audit row
        assert conn.execute("SELECT status FROM mailroom.sender_accounts").fetchall() == [("active",)]
