"""Tenants are apart, tried as each role through SQL: one application's idempotency keys cannot be
read, pre-empted or probed by another (SQL function, Python API, bulk COPY), and the read-only role
reads no body, template data, header, token or link, while the console's figures, `stats` and
`health` still work under it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from tests.fixtures_db import drop_roles, role_url
from worker.cli.main import main
from worker.core.bulk import enqueue_lines
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.ops import audit, roles

_ENQUEUE = (
    "SELECT mailroom.enqueue(recipients => ARRAY[%s], subject => %s, text_body => %s, idempotency_key => %s)"
)


pytestmark = pytest.mark.usefixtures("role_lock")


def _as(db_url: str, role: str) -> psycopg.Connection[Any]:
    return psycopg.connect(role_url(db_url, role))


@pytest.fixture
def make_role(db_url: str) -> Iterator[Callable[[str, str], str]]:
    """Create a login role of a kind ("app", "read-only", or "writer": an application role that may also
    write the queue directly, as the bulk command's COPY does)."""
    made: list[str] = []

    def make(kind: str, role: str) -> str:
        with psycopg.connect(db_url) as conn:
            if kind == "writer":
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
                for grant in (
                    "SELECT mailroom.grant_app_role({})",
                    "GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA mailroom TO {}",
                    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA mailroom TO {}",
                    # What the Python API's INSERT ... RETURNING asks: would this email be suppressed?
                    "GRANT EXECUTE ON FUNCTION mailroom.enqueue_suppression TO {}",
                ):
                    name = sql.Literal(role) if "grant_app_role" in grant else sql.Identifier(role)
                    conn.execute(sql.SQL(grant).format(name))
            else:
                roles.grant(conn, kind, role, create=True, actor="tester")
        made.append(role)
        return role

    yield make
    drop_roles(db_url, *made)


def _enqueue_as(db_url: str, role: str, to: str, key: str) -> int:
    with _as(db_url, role) as conn:
        row = conn.execute(_ENQUEUE, (to, f"for {to}", f"hello {to}", key)).fetchone()
    assert row is not None
    return int(row[0])


def _mine(db_url: str, role: str) -> list[tuple[Any, ...]]:
    with _as(db_url, role) as conn:
        return conn.execute(
            "SELECT id, recipient_email, idempotency_key FROM mailroom.my_emails ORDER BY id"
        ).fetchall()


# --- Idempotency keys -------------------------------------------------------------------------


def test_two_applications_using_the_same_key_each_get_their_own_email(
    db_url: str, make_role: Callable[[str, str], str]
) -> None:
    shop, shop2 = make_role("app", "mr_shop"), make_role("app", "mr_shop2")
    first = _enqueue_as(db_url, shop, "ada@example.com", "order-42")
    theirs = _enqueue_as(db_url, shop2, "bob@example.com", "order-42")
    assert theirs != first
    # Each retry answers with the role's own email, never the other's.
    assert _enqueue_as(db_url, shop, "ada@example.com", "order-42") == first
    assert _enqueue_as(db_url, shop2, "bob@example.com", "order-42") == theirs
    assert _mine(db_url, shop) == [(first, "ada@example.com", "order-42")]
    assert _mine(db_url, shop2) == [(theirs, "bob@example.com", "order-42")]
    with psycopg.connect(db_url) as conn:
        stored = conn.execute(
            "SELECT enqueued_by, recipient_email FROM mailroom.email_queue WHERE idempotency_key = 'order-42'"
            " ORDER BY id"
        ).fetchall()
    assert stored == [("mr_shop", "ada@example.com"), ("mr_shop2", "bob@example.com")]


def test_probing_another_applications_key_reveals_nothing(
    db_url: str, make_role: Callable[[str, str], str]
) -> None:
    shop, prober = make_role("app", "mr_shop"), make_role("app", "mr_prober")
    theirs = _enqueue_as(db_url, shop, "ada@example.com", "reset-ada-7")
    # A key the other role used and a key nobody used get the same answer: a new email of the prober's own.
    used = _enqueue_as(db_url, prober, "eve@example.com", "reset-ada-7")
    unused = _enqueue_as(db_url, prober, "eve@example.com", "reset-nobody-1")
    assert theirs not in (used, unused)
    assert [row[0] for row in _mine(db_url, prober)] == [used, unused]
    assert [row[0] for row in _mine(db_url, shop)] == [theirs]
    with _as(db_url, prober) as conn, pytest.raises(errors.InsufficientPrivilege):
        conn.execute("SELECT id FROM mailroom.email_queue WHERE idempotency_key = 'reset-ada-7'")


def test_the_python_api_and_bulk_copy_scope_keys_to_the_role_they_connect_as(
    db_url: str, settings: Settings, make_role: Callable[[str, str], str]
) -> None:
    a, b = make_role("writer", "mr_writer_a"), make_role("writer", "mr_writer_b")
    request = EmailRequest(
        to="ada@example.com", subject="Order 42", text="thanks", idempotency_key="order-42"
    )
    with _as(db_url, a) as conn:
        first = enqueue(conn, request, settings=settings)
    with _as(db_url, b) as conn:
        theirs = enqueue(conn, request, settings=settings)
        assert theirs != first
        assert enqueue(conn, request, settings=settings) == theirs
    line = json.dumps(
        {"to": "ada@example.com", "subject": "Order 42", "text": "thanks", "idempotency_key": "order-42"}
    )
    fresh = json.dumps(
        {"to": "bob@example.com", "subject": "Order 43", "text": "thanks", "idempotency_key": "order-43"}
    )
    results: list[tuple[int, str]] = []
    enqueue_lines(role_url(db_url, b), [(1, line), (2, fresh)], settings, results.extend)
    ids = [json.loads(text)["id"] for _, text in results]
    assert ids[0] == theirs and ids[1] not in (first, theirs)
    results.clear()
    enqueue_lines(role_url(db_url, a), [(1, line), (2, fresh)], settings, results.extend)
    again = [json.loads(text)["id"] for _, text in results]
    assert again[0] == first and again[1] not in ids


# --- The read-only role -----------------------------------------------------------------------

# Where secrets are: the activation code and link in the bodies and template data, the stored
# List-Unsubscribe link, the tokens, tracked link URLs, raw reports, application events.
SECRET_COLUMNS = [
    ("email_queue", "text_body"),
    ("email_queue", "html_body"),
    ("email_queue", "template_data"),
    ("email_queue", "headers"),
    ("email_queue", "tracking_token"),
    ("email_queue", "unsubscribe_token"),
    # A Message-ID and the recipient it names are all a forged complaint needs.
    ("email_queue", "message_id"),
    ("sent_journal", "message_id"),
    ("archived_emails", "unsubscribe_token"),
    ("tracked_links", "token"),
    ("tracked_links", "url"),
    ("click_events", "url"),
    ("click_events", "link_token"),
    ("click_events_default", "url"),
    ("tokens", "secret"),
    ("tokens", "secret_hash"),
    ("tokens", "code"),
    ("bounce_quarantine", "raw"),
    ("inbox", "payload"),
    ("sender_accounts", "smtp_password_encrypted"),
    ("sender_accounts", "oauth_refresh_token_encrypted"),
]
# Any column whose name says it may hold a secret, in any table (a later part's too), is refused,
# but for these, which hold none.
_SECRET_NAME = re.compile(r"token|secret|encrypted|body|payload|headers|template_data|^url$|^raw$|^code$")
NAMED_LIKE_BUT_PUBLIC = {
    "documents.url": "the address of a document to sign, the same for every signer",
    "sender_accounts.oauth_token_url": "the provider's token endpoint",
    "signatures.payload": "what a signature signs: the chain `docs verify` shows",
    "signatures.payload_hash": "its hash",
    "templates.text_body": "a template: placeholders, no recipient's data",
    "templates.html_body": "a template",
    "events.delivery_payload": "a birthday's template, locale and the person's names, as `people` shows them",
    "sender_dns_findings.code": "a DNS finding's kind (spf_missing, dkim_mismatch, ...)",
    "oauth_sessions.access_token_expires_at": "when a login's access token expires: a time, no token",
}


def _seed_secrets(db_url: str, settings: Settings) -> int:
    """An activation email as the lifecycle mailer writes it: its code and link in body and data."""
    with psycopg.connect(db_url) as conn:
        email_id = enqueue(
            conn,
            EmailRequest(
                to="ada@example.com",
                subject="Activate your account",
                text="Your code is 48213: https://shop.example/activate?t=SECRET-LINK-TOKEN",
                html='<a href="https://shop.example/activate?t=SECRET-LINK-TOKEN">activate</a>',
                campaign_id="welcome",
                track=True,
            ),
            settings=settings,
        )
        conn.execute(
            'UPDATE mailroom.email_queue SET template_data = \'{"code": "48213"}\' WHERE id = %s', (email_id,)
        )
    return email_id


@pytest.mark.parametrize(("table", "column"), SECRET_COLUMNS, ids=[f"{t}.{c}" for t, c in SECRET_COLUMNS])
def test_the_read_only_role_is_refused_every_column_that_carries_a_secret(
    db_url: str, settings: Settings, make_role: Callable[[str, str], str], table: str, column: str
) -> None:
    _seed_secrets(db_url, settings)
    reader = make_role("read-only", "mr_reader")
    with _as(db_url, reader) as conn, pytest.raises(errors.InsufficientPrivilege):
        conn.execute(
            sql.SQL("SELECT {} FROM mailroom.{}").format(sql.Identifier(column), sql.Identifier(table))
        )


def test_the_read_only_role_reads_what_operators_need_and_no_column_named_like_a_secret(
    db_url: str, settings: Settings, make_role: Callable[[str, str], str]
) -> None:
    email_id = _seed_secrets(db_url, settings)
    reader = make_role("read-only", "mr_reader")
    with _as(db_url, reader) as conn:
        row = conn.execute(
            "SELECT status, recipient_email, subject FROM mailroom.email_queue WHERE id = %s",
            (email_id,),
        ).fetchone()
        assert row == ("pending", "ada@example.com", "Activate your account")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM mailroom.email_queue")
        conn.rollback()
        # What health reports of the quarantine, without its raw reports.
        assert conn.execute(
            "SELECT coalesce(sum(raw_kept_bytes), 0) FROM mailroom.bounce_quarantine"
        ).fetchone() == (0,)
        readable = conn.execute(
            "SELECT c.relname, a.attname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'mailroom'"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
            " WHERE c.relkind IN ('r', 'p', 'v') AND has_column_privilege(c.oid, a.attnum, 'SELECT')"
        ).fetchall()
    assert len(readable) > 100
    assert sorted(f"{t}.{c}" for t, c in readable if _SECRET_NAME.search(c)) == sorted(NAMED_LIKE_BUT_PUBLIC)


def test_stats_and_health_run_under_the_read_only_role(
    db_url: str,
    settings: Settings,
    cli_env: dict[str, str],
    make_role: Callable[[str, str], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _seed_secrets(db_url, settings)
    reader = make_role("read-only", "mr_reader")
    monkeypatch.setenv("MAILROOM_DATABASE_URL", role_url(db_url, reader))
    assert main(["stats"]) == 0
    assert main(["health"]) in (0, 1)  # 1: unhealthy (no sender here), not an error
    out = capsys.readouterr()
    assert "permission denied" not in out.out + out.err
    assert "pending" in out.out


def test_a_read_only_role_granted_before_0008_loses_bodies_and_an_app_role_gains_app_audit(
    db_url: str, settings: Settings
) -> None:
    """GRANT never takes a privilege away: the upgrade revokes what became secret from roles granted earlier."""
    from worker.core import db

    db.downgrade(db_url, "0007")
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "read-only", "mr_old_reader", create=True, actor="tester")
        roles.grant(conn, "app", "mr_old_app", create=True, actor="tester")
        conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, created_by)"
            " VALUES ('ada@example.com', 'Activate', 'code 48213', 'mr_old_app')"
        )
    try:
        with _as(db_url, "mr_old_reader") as conn:
            assert conn.execute("SELECT text_body FROM mailroom.email_queue").fetchall() == [("code 48213",)]
        db.upgrade(db_url)
        with _as(db_url, "mr_old_reader") as conn:
            assert conn.execute("SELECT subject FROM mailroom.email_queue").fetchall() == [("Activate",)]
            conn.rollback()
            for column in ("text_body", "html_body", "template_data", "headers"):
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(
                        sql.SQL("SELECT {} FROM mailroom.email_queue").format(sql.Identifier(column))
                    )
                conn.rollback()
        with _as(db_url, "mr_old_app") as conn:
            # Its email from before the upgrade is still its own (status and key).
            assert [r[1] for r in conn.execute("SELECT id, subject FROM mailroom.my_emails").fetchall()] == [
                "Activate"
            ]
            conn.execute("SELECT mailroom.app_audit('app.refund', 'billing', 'order 42', 1, '{}')")
    finally:
        drop_roles(db_url, "mr_old_reader", "mr_old_app")


# --- Reserved headers, and the application's own audit rows ----------------------------------------

RESERVED = [
    ("X-SMTPAPI", '{"filters": {"bypass_list_management": {"settings": {"enable": 1}}}}'),
    ("X-PM-Metadata-mailroom_email_id", "1"),
    ("Authentication-Results", "mx.example.com; dkim=pass header.d=bank.example"),
    ("Resent-From", "ceo@bank.example"),
    ("Received", "from trusted.example by mx.example.com"),
    ("ARC-Authentication-Results", "i=1; mx.example.com; dmarc=pass"),
    ("DKIM-Signature", "v=1; d=bank.example"),
]


@pytest.mark.parametrize(("name", "value"), RESERVED, ids=[n for n, _ in RESERVED])
def test_an_application_role_cannot_set_a_relay_control_or_trace_header(
    db_url: str, settings: Settings, make_role: Callable[[str, str], str], name: str, value: str
) -> None:
    shop = make_role("app", "mr_shop")
    with _as(db_url, shop) as conn, pytest.raises(errors.CheckViolation) as caught:
        conn.execute(
            "SELECT mailroom.enqueue(recipients => ARRAY['ada@example.com'], subject => 'Hi', text_body => 'b',"
            " headers => %s::jsonb)",
            (json.dumps({name: value}),),
        )
    assert caught.value.diag.message_primary is not None
    assert caught.value.diag.message_primary.startswith(f"headers.{name}: "), (
        caught.value.diag.message_primary
    )
    with psycopg.connect(db_url) as conn, pytest.raises(ValueError, match=f"^headers.{re.escape(name)}: "):
        enqueue(
            conn,
            EmailRequest(to="ada@example.com", subject="Hi", text="b", headers={name: value}),
            settings=settings,
        )


def test_an_application_records_its_own_audit_rows_but_not_an_operators(
    db_url: str, make_role: Callable[[str, str], str]
) -> None:
    shop = make_role("app", "mr_shop")
    with _as(db_url, shop) as conn:
        conn.execute("SELECT mailroom.app_audit('app.refund', 'billing', 'order 42', 1, '{\"amount\": 10}')")
        conn.commit()
        for action in ("role.grant", "sender.add", "appx.refund"):
            with pytest.raises(errors.InvalidParameterValue, match="starts with app"):
                conn.execute("SELECT mailroom.app_audit(%s, 'billing')", (action,))
            conn.rollback()
    # What the operator's listing shows (chained later: tests/ops/test_audit_head.py).
    with psycopg.connect(db_url) as conn:
        rows = [
            (r["db_role"], r["actor"], r["action"], r["target"]) for r in audit.recent(conn, 10, action="app")
        ]
    assert rows == [("mr_shop", "billing", "app.refund", "order 42")]


def test_an_applications_audit_row_is_bounded(db_url: str, make_role: Callable[[str, str], str]) -> None:
    shop = make_role("app", "mr_shop")
    with _as(db_url, shop) as conn, pytest.raises(errors.StringDataRightTruncation, match="16 KiB of detail"):
        conn.execute(
            "SELECT mailroom.app_audit('app.note', 'billing', NULL, 0, %s)", (Jsonb({"x": "y" * 20000}),)
        )


def test_going_back_to_one_key_space_stops_while_two_roles_share_a_key(
    db_url: str, make_role: Callable[[str, str], str]
) -> None:
    """Downgrading past 0008 cannot merge two applications' emails: it refuses, naming the key."""
    from worker.core import db

    _enqueue_as(db_url, make_role("app", "mr_shop"), "ada@example.com", "order-42")
    _enqueue_as(db_url, make_role("app", "mr_shop2"), "bob@example.com", "order-42")
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the refusal is found in the chain below
        db.downgrade(db_url, "0007")
    # The refusal may arrive as the context of a later error (releasing the migration lock).
    chain: list[str] = []
    error: BaseException | None = caught.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert any("idempotency key order-42 is used by more than one email" in text for text in chain), chain
    assert db.current_revision(db_url) == db.head_revision()
