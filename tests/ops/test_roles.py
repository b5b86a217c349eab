"""Least privilege: an application's role enqueues and reads its own email's status, nothing else;
a read-only role reads all but the secrets and changes nothing."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from tests.fixtures_db import drop_roles, role_url
from worker.cli.main import main
from worker.core.config import Settings
from worker.ops import roles

pytestmark = pytest.mark.usefixtures("role_lock")


def _as(db_url: str, role: str) -> psycopg.Connection[Any]:
    return psycopg.connect(role_url(db_url, role))


@pytest.fixture
def app_role(db_url: str) -> Any:
    with psycopg.connect(db_url) as conn:
        assert roles.grant(conn, "app", "mr_test_app", create=True, actor="tester")
    yield "mr_test_app"
    drop_roles(db_url, "mr_test_app")


@pytest.fixture
def reader_role(db_url: str) -> Any:
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "read-only", "mr_test_reader", create=True, actor="tester")
    yield "mr_test_reader"
    drop_roles(db_url, "mr_test_reader")


def test_the_app_role_enqueues_and_reads_only_its_own_emails_status(db_url: str, app_role: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body) VALUES ('other@example.com', 's', 'b')"
        )
    with _as(db_url, app_role) as conn:
        row = conn.execute(
            "SELECT mailroom.enqueue(recipients => ARRAY['ada@example.com'], subject => 'Hi', text_body => 'b')"
        ).fetchone()
        assert row is not None
        conn.commit()
        mine = conn.execute("SELECT id, status, recipient_email FROM mailroom.my_emails").fetchall()
    assert mine == [(row[0], "pending", "ada@example.com")]


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) FROM mailroom.send_logs",
        "SELECT smtp_password_encrypted FROM mailroom.sender_accounts",
        "SELECT count(*) FROM mailroom.email_queue",
        "SELECT count(*) FROM mailroom.tokens",
        "SELECT count(*) FROM mailroom.audit_log",
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body) VALUES ('a@example.com', 's', 'b')",
        "UPDATE mailroom.email_queue SET status = 'cancelled'",
        "SELECT mailroom.rescue_expired_claims()",
    ],
)
def test_the_app_role_cannot_read_logs_secrets_or_other_tables(
    db_url: str, app_role: str, statement: str
) -> None:
    with _as(db_url, app_role) as conn, pytest.raises(errors.InsufficientPrivilege):
        conn.execute(statement)


def test_the_read_only_role_reads_the_queue_but_no_secret_and_changes_nothing(
    db_url: str, reader_role: str
) -> None:
    with _as(db_url, reader_role) as conn:
        assert conn.execute("SELECT count(*) FROM mailroom.email_queue").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM mailroom.send_logs").fetchone() == (0,)
        assert (
            conn.execute("SELECT name, status, circuit_state FROM mailroom.sender_accounts").fetchall() == []
        )
        for statement in (
            "SELECT smtp_password_encrypted FROM mailroom.sender_accounts",
            "SELECT secret_hash FROM mailroom.tokens",
            "UPDATE mailroom.email_queue SET status = 'cancelled'",
            "DELETE FROM mailroom.bounce_list",
            "SELECT mailroom.enqueue(recipients => ARRAY['a@example.com'], subject => 's', text_body => 'b')",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)
            conn.rollback()


def test_nobody_else_may_call_the_enqueue_function(db_url: str, reader_role: str) -> None:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT has_function_privilege('public', p.oid, 'EXECUTE') FROM pg_proc p"
            " WHERE p.oid = 'mailroom.enqueue'::regproc"
        ).fetchone()
    assert row == (False,)


def test_db_grant_through_the_cli_creates_the_role_and_audits_it(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        assert main(["db", "grant", "app", "mr_cli_app", "--create"]) == 0
        assert "created role mr_cli_app" in capsys.readouterr().out
        assert main(["db", "grant", "app", "mr_cli_app"]) == 0
        with psycopg.connect(db_url) as conn:
            audit = conn.execute(
                "SELECT action, target, detail->>'created' FROM mailroom.audit_log ORDER BY id"
            ).fetchall()
        assert audit == [("role.grant", "mr_cli_app", "true"), ("role.grant", "mr_cli_app", "false")]
    finally:
        drop_roles(db_url, "mr_cli_app")


def test_db_grant_refuses_a_missing_role_without_create_and_a_bad_name(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "grant", "read-only", "mr_nobody"]) == 2
    assert "does not exist; add --create" in capsys.readouterr().err
    assert main(["db", "grant", "read-only", "Robert'); DROP TABLE x;--"]) == 2
    assert "lower-case letters" in capsys.readouterr().err


async def test_the_console_reads_every_screen_under_the_read_only_role(
    db_url: str, reader_role: str, settings: Settings
) -> None:
    from console.app import MailroomConsole
    from console.context import MORE_SCREENS, SCREENS
    from console.wiring import ProducerActions
    from tests.console.seed import seed

    seed(db_url)
    app = MailroomConsole(role_url(db_url, reader_role), settings, ProducerActions(), read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        live = await app.wait_until_shown(lambda: app.live_state == "live" and app.refreshes > 0, 10)
        assert live, (app.live_state, app.refreshes, app.notices)
        for _, key, _ in (*SCREENS[1:], *MORE_SCREENS):  # the first is shown already
            before = app.refreshes
            await pilot.press(key)
            shown = await app.wait_until_shown(lambda: app.refreshes > before, 10)  # noqa: B023
            assert shown, (key, app.notices)
    assert not [text for severity, text in app.notices if severity == "error"]


def test_a_read_only_role_granted_before_an_upgrade_reads_the_new_columns_but_no_new_secret(
    db_url: str,
) -> None:
    """Revision 0007 adds columns and a table; a role granted at 0006 would otherwise be refused them,
    and the console under it would fail on its Senders screen."""
    from worker.core import db

    db.downgrade(db_url, "0006")
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "read-only", "mr_test_old_reader", create=True, actor="tester")
    try:
        db.upgrade(db_url)
        with _as(db_url, "mr_test_old_reader") as conn:
            conn.execute("SELECT bounce_domain, relay_provider, auth_type FROM mailroom.sender_accounts")
            conn.execute("SELECT digest_id, sender_account_id, campaign_id FROM mailroom.bounce_events")
            conn.execute("SELECT count(*) FROM mailroom.complaint_digests")
            conn.rollback()
            for secret in ("oauth_client_secret_encrypted", "oauth_refresh_token_encrypted"):
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(
                        sql.SQL("SELECT {} FROM mailroom.sender_accounts").format(sql.Identifier(secret))
                    )
                conn.rollback()
    finally:
        drop_roles(db_url, "mr_test_old_reader")


def test_a_role_writing_the_queue_before_the_upgrade_still_enqueues_through_the_python_api(
    db_url: str, settings: Settings
) -> None:
    """Revision 0010 has the Python API ask `mailroom.enqueue_suppression` in its INSERT; a role that
    wrote the queue before it (no function grants) must go on enqueueing after the upgrade."""
    from mailroom import EmailRequest, enqueue
    from worker.core import db

    db.downgrade(db_url, "0009")
    with psycopg.connect(db_url) as conn:
        conn.execute("CREATE ROLE mr_test_old_writer LOGIN")
        for grant in (
            "GRANT USAGE ON SCHEMA mailroom TO mr_test_old_writer",
            "GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA mailroom TO mr_test_old_writer",
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA mailroom TO mr_test_old_writer",
        ):
            conn.execute(grant)
    try:
        db.upgrade(db_url)
        with _as(db_url, "mr_test_old_writer") as conn:
            email_id = enqueue(conn, EmailRequest(to="ada@example.com", subject="Hi", text="x"))
            conn.commit()
        assert email_id > 0 and not email_id.suppressed
    finally:
        drop_roles(db_url, "mr_test_old_writer")
