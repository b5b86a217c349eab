"""Impossible states are refused by the database itself, whoever writes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

EMAIL = (
    "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body) "
    "VALUES ('a@example.com', 's', 'b') RETURNING id"
)

# (description, setup statements, offending statement)
IMPOSSIBLE: list[tuple[str, list[str], str]] = [
    (
        "email without any body",
        [],
        "INSERT INTO mailroom.email_queue (recipient_email, subject) VALUES ('a@x.io', 's')",
    ),
    (
        "email born sent",
        [],
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, status, sent_at)"
        " VALUES ('a@x.io', 's', 'b', 'sent', now())",
    ),
    (
        "newline in a subject",
        [],
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body)"
        " VALUES ('a@x.io', E's\\nBcc: x@y.z', 'b')",
    ),
    ("retry count above max_retries", [EMAIL], "UPDATE mailroom.email_queue SET retry_count = 6"),
    ("assigned without a lease", [EMAIL], "UPDATE mailroom.email_queue SET status = 'assigned'"),
    (
        "sent straight from pending",
        [EMAIL],
        "UPDATE mailroom.email_queue SET status = 'sent', sent_at = now()",
    ),
    (
        "failed without an error",
        [EMAIL],
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'w',"
        " lease_token = gen_random_uuid(), lease_expires_at = now(); UPDATE mailroom.email_queue SET status = 'failed'",
    ),
    (
        "cancelled email revived",
        [EMAIL, "UPDATE mailroom.email_queue SET status = 'cancelled'"],
        "UPDATE mailroom.email_queue SET status = 'pending'",
    ),
    (
        "rewritten created_at",
        [EMAIL],
        "UPDATE mailroom.email_queue SET created_at = now() - interval '1 day'",
    ),
    ("suppressed without a reason", [EMAIL], "UPDATE mailroom.email_queue SET status = 'suppressed'"),
    (
        "sender with a negative daily limit",
        [],
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host,"
        " smtp_port, daily_limit) VALUES ('s', 'a@x.io', 'h', 25, -1)",
    ),
    (
        "sender warming up without a limit",
        [],
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host,"
        " smtp_port, warmup_stage) VALUES ('s', 'a@x.io', 'h', 25, 2)",
    ),
    (
        "sender with an unknown status",
        [],
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host,"
        " smtp_port, status) VALUES ('s', 'a@x.io', 'h', 25, 'sleepy')",
    ),
    (
        "bounce of a mixed-case address",
        [],
        "INSERT INTO mailroom.bounce_list (email, bounce_type) VALUES ('A@x.io', 'hard')",
    ),
    (
        "token code of four digits",
        ["INSERT INTO mailroom.accounts (email, login) VALUES ('a@x.io', 'a')"],
        "UPDATE mailroom.tokens SET code = '1234'",
    ),
    (
        "active account returned to provisioned",
        ["INSERT INTO mailroom.accounts (email, login, status) VALUES ('a@x.io', 'a', 'active')"],
        "UPDATE mailroom.accounts SET status = 'provisioned'",
    ),
    (
        "person in an unknown time zone",
        [],
        "INSERT INTO mailroom.people (email, first_name, last_name,"
        " date_of_birth, time_zone) VALUES ('p@x.io', 'A', 'B', '1990-01-01', 'Mars/Olympus')",
    ),
    (
        "person born tomorrow",
        [],
        "INSERT INTO mailroom.people (email, first_name, last_name,"
        " date_of_birth, time_zone) VALUES ('p@x.io', 'A', 'B', current_date + 1, 'Europe/London')",
    ),
    (
        "document with a short SHA-256",
        [],
        "INSERT INTO mailroom.documents (doc_id, checksum, checksum_algorithm)"
        " VALUES ('d1', 'abcd', 'SHA-256')",
    ),
    (
        "second signature of one signer",
        [
            "INSERT INTO mailroom.documents (doc_id) VALUES ('d1')",
            "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash, signature)"
            " VALUES ('d1', 's@x.io', now(), 'nonce-0000000000001', 'p', repeat('a', 64), 'sig')",
        ],
        "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash, signature,"
        " prev_hash) VALUES ('d1', 's@x.io', now(), 'nonce-0000000000002', 'p', repeat('b', 64), 'sig',"
        " repeat('a', 64))",
    ),
    (
        "reused signature nonce",
        [
            "INSERT INTO mailroom.documents (doc_id) VALUES ('d1')",
            "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash, signature)"
            " VALUES ('d1', 's@x.io', now(), 'nonce-0000000000001', 'p', repeat('a', 64), 'sig')",
        ],
        "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash, signature,"
        " prev_hash) VALUES ('d1', 't@x.io', now(), 'nonce-0000000000001', 'p', repeat('b', 64), 'sig',"
        " repeat('a', 64))",
    ),
    (
        "forked signature chain",
        [
            "INSERT INTO mailroom.documents (doc_id) VALUES ('d1')",
            "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash, signature)"
            " VALUES ('d1', 's@x.io', now(), 'nonce-0000000000001', 'p', repeat('a', 64), 'sig')",
        ],
        "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash, signature)"
        " VALUES ('d1', 't@x.io', now(), 'nonce-0000000000002', 'p', repeat('b', 64), 'sig')",
    ),
    (
        "signature created_at rewritten",
        [
            "INSERT INTO mailroom.documents (doc_id) VALUES ('d1')",
            "INSERT INTO mailroom.signatures (doc_id, signer_email, signed_at, nonce, payload, payload_hash, signature)"
            " VALUES ('d1', 's@x.io', now(), 'nonce-0000000000001', 'p', repeat('a', 64), 'sig')",
        ],
        "UPDATE mailroom.signatures SET created_at = now() - interval '1 year'",
    ),
    (
        "duplicate inbox event",
        [
            "INSERT INTO mailroom.inbox (message_id, consumer, event_type, payload) VALUES ('m', 'c', 't', '{}')"
        ],
        "INSERT INTO mailroom.inbox (message_id, consumer, event_type, payload) VALUES ('m', 'c', 't', '{}')",
    ),
]


@pytest.mark.parametrize(
    ("setup", "statement"), [(s, st) for _, s, st in IMPOSSIBLE], ids=[d for d, _, _ in IMPOSSIBLE]
)
def test_database_rejects_impossible_state(
    conn: psycopg.Connection[Any], setup: list[str], statement: str
) -> None:
    for step in setup:
        conn.execute(step)
    with pytest.raises((psycopg.errors.IntegrityError, psycopg.errors.RaiseException)):
        conn.execute(statement)


def test_email_walks_its_lifecycle_with_timestamps(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(EMAIL).fetchone()
    assert row is not None
    email_id = row["id"]
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'w1', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        (email_id,),
    )
    conn.execute("UPDATE mailroom.email_queue SET status = 'sent' WHERE id = %s", (email_id,))
    done = conn.execute(
        "SELECT status, assigned_at, sent_at, finished_at, lease_token FROM mailroom.email_queue WHERE id = %s",
        (email_id,),
    ).fetchone()
    assert done is not None
    assert done["status"] == "sent"
    assert done["assigned_at"] is not None and done["sent_at"] is not None and done["finished_at"] is not None
    assert done["lease_token"] is None


def test_new_account_gets_an_activation_token_with_strong_secret(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO mailroom.accounts (email, login) VALUES ('a@x.io', 'a')")
    token = conn.execute("SELECT action, secret, code FROM mailroom.tokens").fetchone()
    assert token is not None
    assert token["action"] == "activation"
    assert len(token["secret"]) == 32
    assert len(token["code"]) == 5 and token["code"].isdigit()


def test_random_code_is_always_five_digits_and_spread(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute("SELECT mailroom.random_code() AS c FROM generate_series(1, 20000)").fetchall()
    codes = [r["c"] for r in rows]
    assert all(len(c) == 5 and c.isdigit() for c in codes)
    # Uniform over 00000..99999: every leading digit appears about 2,000 times.
    leading = [sum(1 for c in codes if c[0] == str(d)) for d in range(10)]
    assert min(leading) > 1700 and max(leading) < 2300
    assert len(set(codes)) > 17000


def test_unsuspending_a_never_activated_account_returns_it_to_provisioned(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("INSERT INTO mailroom.accounts (email, login) VALUES ('a@x.io', 'a')")
    conn.execute("UPDATE mailroom.accounts SET status = 'suspended'")
    conn.execute("UPDATE mailroom.accounts SET status = 'active'")
    row = conn.execute("SELECT status, suspended_at, unsuspended_at FROM mailroom.accounts").fetchone()
    assert row is not None
    assert row["status"] == "provisioned"
    assert row["suspended_at"] is None and row["unsuspended_at"] is not None
