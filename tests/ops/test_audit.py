"""The audit trail against the real database: one row per sensitive operation, in its transaction, never changed."""

from __future__ import annotations

import getpass
from typing import Any

import psycopg
import pytest

from tests.ops.helpers import audit_rows, failed_emails
from tests.worker.helpers import enqueue_many
from worker.core.crypto import SecretBox, generate_key
from worker.ops import audit
from worker.ops.actions import cancel, retry, retry_all_failed
from worker.ops.senders import SenderSpec, add_sender, set_sender_status


def sender(conn: psycopg.Connection[Any], name: str = "primary", *, actor: str | None = None) -> int:
    spec = SenderSpec(name, "noreply@example.org", "smtp.example.org", 587, smtp_username="mailer")
    return add_sender(conn, spec, "relay-secret", SecretBox(generate_key()), actor=actor)


def test_adding_a_sender_writes_one_audit_row_with_the_os_user_and_no_secret(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    sender_id = sender(conn)
    conn.commit()
    [row] = audit_rows(db_url)
    assert (row["action"], row["actor"], row["target"], row["affected"]) == (
        "sender.add",
        getpass.getuser(),
        "primary",
        1,
    )
    assert row["detail"]["id"] == sender_id and row["detail"]["login"] is True
    assert row["db_role"] == conn.execute("SELECT session_user AS u").fetchone()["u"]  # type: ignore[index]
    assert "relay-secret" not in str(row)


@pytest.mark.parametrize(
    ("steps", "action", "before", "after"),
    [
        ((("paused", None),), "sender.pause", "active", "paused"),
        ((("suspended", "credentials revoked"),), "sender.suspend", "active", "suspended"),
        ((("suspended", None), ("active", None)), "sender.resume", "suspended", "active"),
    ],
)
def test_each_sender_status_change_writes_one_audit_row_saying_from_what_to_what(
    db_url: str,
    conn: psycopg.Connection[Any],
    steps: tuple[tuple[str, str | None], ...],
    action: str,
    before: str,
    after: str,
) -> None:
    sender(conn)
    for status, reason in steps:
        set_sender_status(conn, "primary", status, reason, actor="alice")
    conn.commit()
    rows = audit_rows(db_url)
    assert len(rows) == 1 + len(steps)
    last = rows[-1]
    assert (last["action"], last["actor"], last["target"], last["affected"]) == (
        action,
        "alice",
        "primary",
        1,
    )
    assert (last["detail"]["from"], last["detail"]["to"]) == (before, after)
    assert last["detail"]["reason"] == steps[-1][1]


def test_a_refused_status_change_writes_no_audit_row(db_url: str, conn: psycopg.Connection[Any]) -> None:
    sender(conn)
    with pytest.raises(ValueError, match="cannot set it active"):
        set_sender_status(conn, "primary", "active")
    with pytest.raises(LookupError):
        set_sender_status(conn, "nobody", "suspended")
    conn.commit()
    assert [r["action"] for r in audit_rows(db_url)] == ["sender.add"]


def test_a_rolled_back_operation_leaves_no_audit_row(db_url: str, conn: psycopg.Connection[Any]) -> None:
    sender(conn)
    conn.commit()
    set_sender_status(conn, "primary", "suspended", actor="alice")
    assert len(audit_rows(db_url)) == 1  # not visible to others before commit
    conn.rollback()
    assert [r["action"] for r in audit_rows(db_url)] == ["sender.add"]
    status = conn.execute("SELECT status FROM mailroom.sender_accounts").fetchone()
    assert status is not None and status["status"] == "active"


def test_bulk_retry_writes_one_row_counting_only_the_emails_it_changed(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    failed = failed_emails(db_url, 3)
    pending = enqueue_many(db_url, 1, start=10)
    result = retry(conn, [*failed, *pending, 999_999], actor="console:bob")
    conn.commit()
    [row] = audit_rows(db_url)
    assert (row["action"], row["actor"], row["affected"]) == ("queue.retry", "console:bob", 3)
    assert row["detail"] == {"requested": 5, "skipped": 2, "ids": failed}
    assert row["target"] == "emails " + ", ".join(map(str, sorted([*failed, *pending, 999_999])))
    assert result.changed == failed


def test_retry_all_failed_writes_one_row_with_the_count(db_url: str, conn: psycopg.Connection[Any]) -> None:
    failed = failed_emails(db_url, 4)
    retry_all_failed(conn)
    conn.commit()
    [row] = audit_rows(db_url)
    assert (row["action"], row["target"], row["affected"]) == ("queue.retry", "every failed email", 4)
    assert row["detail"] == {"all_failed": True, "ids": failed}


def test_bulk_cancel_writes_one_row_and_lists_at_most_a_hundred_ids(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    ids = enqueue_many(db_url, 120)
    cancel(conn, ids, actor="alice")
    conn.commit()
    [row] = audit_rows(db_url)
    assert (row["action"], row["actor"], row["affected"]) == ("queue.cancel", "alice", 120)
    assert row["target"] == f"120 emails ({ids[0]}..{ids[-1]})"
    assert row["detail"]["ids"] == ids[:100] and row["detail"]["ids_truncated"] is True


def test_a_cancel_rolled_back_with_its_transaction_leaves_no_audit_row(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    ids = enqueue_many(db_url, 2)
    cancel(conn, ids)
    conn.rollback()
    assert audit_rows(db_url) == []


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE mailroom.audit_log SET actor = 'someone else'",
        "DELETE FROM mailroom.audit_log",
        "TRUNCATE mailroom.audit_log",
    ],
)
def test_the_audit_log_refuses_update_delete_and_truncate(
    db_url: str, conn: psycopg.Connection[Any], statement: str
) -> None:
    audit.record(conn, "sender.suspend", "alice", "primary", 1)
    conn.commit()
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        conn.execute(statement)
    conn.rollback()
    assert [r["actor"] for r in audit_rows(db_url)] == ["alice"]


def test_recent_lists_newest_first_by_action_family_and_since(conn: psycopg.Connection[Any]) -> None:
    for action in ("sender.add", "queue.retry", "sender.suspend", "sender_x.add"):
        audit.record(conn, action, "alice")
    conn.execute("SELECT mailroom.audit('queue.cancel', 'alice')")
    actions = [r["action"] for r in audit.recent(conn, 10)]
    assert actions == ["queue.cancel", "sender_x.add", "sender.suspend", "queue.retry", "sender.add"]
    assert [r["action"] for r in audit.recent(conn, 10, action="sender")] == ["sender.suspend", "sender.add"]
    assert [r["action"] for r in audit.recent(conn, 10, action="queue.retry")] == ["queue.retry"]
    assert len(audit.recent(conn, 2)) == 2
    newest = audit.recent(conn, 1)[0]["at"]
    assert [r["action"] for r in audit.recent(conn, 10, since=newest)] == ["queue.cancel"]


def test_the_actor_falls_back_to_the_uid_when_the_os_user_has_no_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def nameless() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", nameless)
    import os

    assert audit.cli_actor() == f"uid:{os.getuid()}"
    assert audit.console_actor() == f"console:uid:{os.getuid()}"
