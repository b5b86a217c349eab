"""User lifecycle (reference 01) against a real PostgreSQL and, end to end, a real SMTP server."""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.worker.helpers import add_sender, run_until_drained
from worker.core.config import Settings
from worker.core.validation import ValidationError
from worker.devtools.sink import RunningSink
from worker.engine.delivery import Worker, WorkerOptions
from worker.producers.lifecycle import (
    PRODUCER,
    TokenError,
    consume_token,
    create_account,
    list_accounts,
    mail_tokens,
    request_recovery,
    resend_activation,
    suspend_accounts,
    unsuspend_accounts,
)

Conn = psycopg.Connection[dict[str, Any]]


def _account(conn: Conn, account_id: int) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM mailroom.accounts WHERE id = %s", (account_id,)).fetchone()
    assert row is not None
    return row


def _tokens(conn: Conn, account_id: int) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM mailroom.tokens WHERE account_id = %s ORDER BY id", (account_id,)
    ).fetchall()


async def _mail_all(
    db_url: str, settings: Settings, now: datetime | None = None
) -> tuple[dict[int, int], dict[int, str]]:
    mailed: dict[int, int] = {}
    skipped: dict[int, str] = {}
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        while True:
            done = await mail_tokens(aconn, settings, now=now)
            mailed.update(done.mailed)
            skipped.update(done.skipped)
            if not done.handled:
                return mailed, skipped


def test_creating_an_account_creates_its_activation_token(conn: Conn, settings: Settings) -> None:
    settings = replace(settings, token_ttl_seconds=600)
    account_id = create_account(conn, "Ada@Example.com", "ada", settings=settings)
    conn.commit()
    account = _account(conn, account_id)
    [token] = _tokens(conn, account_id)
    assert account["status"] == "provisioned" and account["email"] == "Ada@example.com"
    assert token["action"] == "activation"
    assert len(token["secret"]) == 32 and re.fullmatch(r"[0-9]{5}", token["code"])
    assert token["expires_at"] - token["created_at"] == timedelta(seconds=600)


def test_duplicate_email_or_login_is_a_clear_error_and_stores_nothing(conn: Conn, settings: Settings) -> None:
    create_account(conn, "ada@example.com", "ada", settings=settings)
    with pytest.raises(ValidationError, match="email: an account with this email already exists"):
        create_account(conn, "ada@example.com", "other", settings=settings)
    with pytest.raises(ValidationError, match="login: an account with this login already exists"):
        create_account(conn, "bob@example.com", "ada", settings=settings)
    with pytest.raises(ValidationError, match="email: invalid email address"):
        create_account(conn, "not an address", "carol", settings=settings)
    conn.commit()
    assert [a.login for a in list_accounts(conn)] == ["ada"]


def test_activation_suspension_and_unsuspension_keep_their_timestamps(conn: Conn, settings: Settings) -> None:
    account_id = create_account(conn, "ada@example.com", "ada", settings=settings)
    conn.commit()
    [token] = _tokens(conn, account_id)
    conn.commit()
    done = consume_token(conn, code=token["code"], email="ada@example.com")
    conn.commit()
    active = _account(conn, account_id)
    assert done.account_status == "active" and active["activated_at"] is not None

    assert suspend_accounts(conn, [account_id, 999]).summary("suspended", "account(s)") == (
        "suspended 1 account(s); left 1 alone (999: no such account)"
    )
    conn.commit()
    suspended = _account(conn, account_id)
    assert suspended["status"] == "suspended" and suspended["suspended_at"] is not None
    assert suspended["unsuspended_at"] is None

    assert unsuspend_accounts(conn, [account_id]).changed == [account_id]
    conn.commit()
    back = _account(conn, account_id)
    assert back["status"] == "active" and back["suspended_at"] is None
    assert back["unsuspended_at"] is not None and back["activated_at"] == active["activated_at"]


def test_unsuspending_a_never_activated_account_returns_it_to_provisioned(
    conn: Conn, settings: Settings
) -> None:
    account_id = create_account(conn, "ada@example.com", "ada", settings=settings)
    suspend_accounts(conn, [account_id])
    result = unsuspend_accounts(conn, [account_id])
    conn.commit()
    assert result.changed == [account_id]
    account = _account(conn, account_id)
    assert account["status"] == "provisioned" and account["activated_at"] is None
    assert unsuspend_accounts(conn, [account_id]).skipped == {account_id: "is provisioned"}


def test_consuming_a_bad_token_fails_clearly_and_changes_nothing(conn: Conn, settings: Settings) -> None:
    ada = create_account(conn, "ada@example.com", "ada", settings=settings)
    bob = create_account(conn, "bob@example.com", "bob", settings=settings)
    conn.commit()
    [ada_token], [bob_token] = _tokens(conn, ada), _tokens(conn, bob)
    conn.commit()
    later = datetime.now(UTC) + timedelta(minutes=16)

    with pytest.raises(TokenError, match="expired at"):
        consume_token(conn, secret=ada_token["secret"], now=later)
    with pytest.raises(TokenError, match="belongs to another account"):
        consume_token(conn, secret=bob_token["secret"].hex(), email="ada@example.com")
    wrong_code = f"{(int(ada_token['code']) + 1) % 100000:05d}"
    with pytest.raises(TokenError, match="no token with this code"):
        consume_token(conn, code=wrong_code, email="ada@example.com")
    with pytest.raises(TokenError, match="not a password_recovery token"):
        consume_token(conn, secret=ada_token["secret"], action="password_recovery")
    assert _account(conn, ada)["status"] == "provisioned"
    assert _tokens(conn, ada)[0]["consumed_at"] is None
    conn.commit()

    consume_token(conn, secret=ada_token["secret"])
    conn.commit()
    with pytest.raises(TokenError, match="already used"):
        consume_token(conn, code=ada_token["code"], email="ada@example.com")
    # The database holds the same line for any writer: a used token cannot be reset or reused.
    with pytest.raises(psycopg.errors.CheckViolation, match="was already consumed"):
        conn.execute("UPDATE mailroom.tokens SET consumed_at = NULL WHERE id = %s", (ada_token["id"],))
    conn.rollback()
    with pytest.raises(psycopg.errors.CheckViolation, match="expired at"):
        conn.execute(
            "UPDATE mailroom.tokens SET consumed_at = expires_at + interval '1 second' WHERE id = %s",
            (bob_token["id"],),
        )
    conn.rollback()
    suspend_accounts(conn, [bob])
    conn.commit()
    with pytest.raises(TokenError, match="the account is suspended"):
        consume_token(conn, secret=bob_token["secret"])
    assert _tokens(conn, bob)[0]["consumed_at"] is None
    # A token is consumed in a transaction of its own (a refused code must stay counted).
    with pytest.raises(RuntimeError, match="outside any open transaction"):
        consume_token(conn, secret=bob_token["secret"])


def test_password_recovery_is_only_for_active_accounts(conn: Conn, settings: Settings) -> None:
    account_id = create_account(conn, "ada@example.com", "ada", settings=settings)
    conn.commit()
    with pytest.raises(ValidationError, match="is provisioned: only active accounts recover"):
        request_recovery(conn, account_id, settings)
    [token] = _tokens(conn, account_id)
    conn.commit()
    consume_token(conn, secret=token["secret"])
    token_id = request_recovery(conn, account_id, settings)
    conn.commit()
    assert [t["action"] for t in _tokens(conn, account_id)] == ["activation", "password_recovery"]
    assert _tokens(conn, account_id)[1]["id"] == token_id


def test_random_codes_are_uniform_five_digits_and_secrets_unique(conn: Conn) -> None:
    rows = conn.execute(
        "SELECT mailroom.random_code() AS code, mailroom.random_secret() AS secret"
        " FROM generate_series(1, 20000)"
    ).fetchall()
    codes = [r["code"] for r in rows]
    assert all(re.fullmatch(r"[0-9]{5}", c) for c in codes)
    assert len({r["secret"] for r in rows}) == 20000 and {len(r["secret"]) for r in rows} == {32}
    # Chi-square over the leading digit (9 degrees of freedom; 27.9 is the 0.1% critical value).
    counts = Counter(c[0] for c in codes)
    chi2 = sum((counts[str(d)] - 2000) ** 2 / 2000 for d in range(10))
    assert chi2 < 27.9


async def test_mailer_mails_new_tokens_once_and_skips_expired_and_wrong_state(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    settings = replace(settings, lifecycle_base_url="https://app.example.com")
    ada = create_account(conn, "ada@example.com", "ada", locale="fr", settings=settings)
    bob = create_account(conn, "bob@example.com", "bob", settings=settings)
    carol = create_account(conn, "carol@example.com", "carol", settings=settings)
    suspend_accounts(conn, [bob])
    [carol_token] = _tokens(conn, carol)
    conn.commit()
    consume_token(conn, secret=carol_token["secret"])
    recovery = request_recovery(conn, carol, settings)
    suspend_accounts(conn, [carol])  # recovery requested, then the account was suspended
    conn.commit()

    [ada_token] = _tokens(conn, ada)
    conn.commit()
    mailed, skipped = await _mail_all(db_url, settings)
    assert set(mailed) == {ada_token["id"]}
    assert skipped == {
        _tokens(conn, bob)[0]["id"]: "account is suspended, not provisioned",
        _tokens(conn, carol)[0]["id"]: "already consumed",
        recovery: "account is suspended, not active",
    }
    email = conn.execute("SELECT * FROM mailroom.email_queue").fetchone()
    assert email is not None and email["id"] == mailed[ada_token["id"]]
    assert email["recipient_email"] == "ada@example.com" and email["locale"] == "fr"
    assert ada_token["code"] in email["text_body"]
    assert f"https://app.example.com/activate?token={ada_token['secret'].hex()}" in email["text_body"]
    assert _tokens(conn, ada)[0]["mailed_at"] is not None and _tokens(conn, ada)[0]["email_id"] == email["id"]
    # Mailed or skipped, no token keeps its plain secret; the link still works through the secret's hash.
    assert conn.execute("SELECT count(*) AS n FROM mailroom.tokens WHERE secret IS NOT NULL").fetchone() == {
        "n": 0
    }
    job = conn.execute("SELECT last_seq FROM mailroom.jobs WHERE name = 'lifecycle_mailer'").fetchone()
    assert job == {"last_seq": max([*mailed, *skipped])}
    assert await _mail_all(db_url, settings) == ({}, {})

    # An activation token that expired before any mailer ran is not mailed.
    resend_activation(conn, [ada], settings)
    conn.commit()
    mailed, skipped = await _mail_all(db_url, settings, now=datetime.now(UTC) + timedelta(hours=1))
    assert mailed == {} and list(skipped.values()) == ["expired before it was mailed"]


async def test_mailer_does_not_skip_a_token_that_commits_after_a_higher_one(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    with psycopg.connect(db_url) as slow:
        create_account(slow, "slow@example.com", "slow", settings=settings)  # lower token id, not committed
        create_account(conn, "fast@example.com", "fast", settings=settings)
        conn.commit()
        first, _ = await _mail_all(db_url, settings)
        slow.commit()
    second, _ = await _mail_all(db_url, settings)
    assert len(first) == 1 and len(second) == 1
    assert min(second) < min(first)  # the late committer's token had the lower id and was still mailed


async def test_racing_mailers_mail_every_token_exactly_once(db_url: str, settings: Settings) -> None:
    total, writers_done = 2000, threading.Event()

    def provision(start: int) -> None:
        # Accounts keep arriving while the mailers race, in many small transactions.
        with psycopg.connect(db_url) as wconn:
            for batch in range(start, start + total // 2, 50):
                wconn.execute(
                    "INSERT INTO mailroom.accounts (email, login)"
                    " SELECT 'u' || i || '@example.com', 'u' || i FROM generate_series(%s::int, %s::int) i",
                    (batch, batch + 49),
                )
                wconn.commit()

    mailed: list[int] = []

    async def mailer() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            while True:
                done = await mail_tokens(aconn, settings, limit=50)
                mailed.extend(done.mailed)
                if not done.handled and writers_done.is_set():
                    return
                if not done.handled:
                    await asyncio.sleep(0)  # let the writers commit more

    writers = [threading.Thread(target=provision, args=(s,)) for s in (0, total // 2)]
    for w in writers:
        w.start()
    racing = asyncio.gather(*(mailer() for _ in range(4)))

    def join_writers() -> None:
        for w in writers:
            w.join()

    await asyncio.to_thread(join_writers)
    writers_done.set()
    await asyncio.wait_for(racing, timeout=90)

    with psycopg.connect(db_url, row_factory=dict_row) as check:
        tokens = check.execute("SELECT id, mailed_at, email_id, secret FROM mailroom.tokens").fetchall()
        emails = check.execute(
            "SELECT count(*) AS n, count(DISTINCT reference_id) AS d FROM mailroom.email_queue"
        ).fetchone()
    assert len(tokens) == total
    assert sorted(mailed) == sorted(t["id"] for t in tokens)  # every token handed out once, by one mailer
    assert all(t["mailed_at"] is not None and t["email_id"] is not None for t in tokens)
    assert emails == {"n": total, "d": total}
    assert all(t["secret"] is None for t in tokens)  # each mailer forgot the secrets it mailed


async def test_new_account_to_activation_end_to_end(
    db_url: str, conn: Conn, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    account_id = create_account(conn, "ada@example.com", "ada", settings=settings)
    conn.commit()
    # The real worker with the lifecycle producer: the token's NOTIFY wakes it, delivery sends the email.
    worker = Worker(db_url, settings, WorkerOptions(concurrency=1, poll_seconds=0.2), producers=[PRODUCER])
    task = asyncio.create_task(worker.run())
    try:
        assert await smtp_sink.wait_for(1, timeout=20)
    finally:
        worker.stop()
        await task
    [received] = smtp_sink.messages_to("ada@example.com")
    assert received.message["Subject"] == "Activate your account, ada"
    body = received.message.get_body(("plain",))
    assert body is not None
    match = re.search(r"activation code is (\d{5})", body.get_content())
    assert match is not None
    consume_token(conn, code=match.group(1), email="ada@example.com", action="activation")
    conn.commit()
    assert _account(conn, account_id)["status"] == "active"

    # Password recovery: requested, mailed by the producer's job, delivered.
    request_recovery(conn, account_id, settings)
    conn.commit()
    mailed, _ = await _mail_all(db_url, settings)
    assert len(mailed) == 1
    await run_until_drained(db_url, settings)
    recovered = smtp_sink.messages_to("ada@example.com")[-1]
    assert recovered.message["Subject"] == "Reset your password, ada"
    assert "/recover?token=" in recovered.message.get_body(("plain",)).get_content()  # type: ignore[union-attr]


def _attempts(conn: Conn, account_id: int) -> list[int]:
    rows = _tokens(conn, account_id)
    conn.commit()
    return [t["failed_attempts"] for t in rows]


def test_five_wrong_codes_lock_the_token_and_the_sixth_guess_fails_even_when_right(
    conn: Conn, settings: Settings
) -> None:
    ada = create_account(conn, "ada@example.com", "ada", settings=settings)
    bob = create_account(conn, "bob@example.com", "bob", settings=settings)
    conn.commit()
    [token] = _tokens(conn, ada)
    conn.commit()
    wrong = [f"{(int(token['code']) + n) % 100000:05d}" for n in range(1, 6)]
    # An unknown address and a wrong code get the same answer (nothing says which part was wrong).
    with pytest.raises(TokenError, match=r"^token: no token with this code for nobody@example\.com$"):
        consume_token(conn, code=wrong[0], email="nobody@example.com")
    for n, guess in enumerate(wrong[:4], start=1):
        with pytest.raises(TokenError, match=r"^token: no token with this code for ada@example\.com$"):
            consume_token(conn, code=guess, email="ada@example.com")
        assert _attempts(conn, ada) == [n]  # committed by consume_token itself
    with pytest.raises(TokenError, match="locked after 5 wrong codes; ask for a new one"):
        consume_token(conn, code=wrong[4], email="ada@example.com")
    # The sixth guess is the right code, and fails exactly like a wrong one; the link is dead too.
    with pytest.raises(
        TokenError, match=r"^token: this token was locked after 5 wrong codes; ask for a new one$"
    ):
        consume_token(conn, code=token["code"], email="ada@example.com")
    with pytest.raises(TokenError, match="locked after 5 wrong codes"):
        consume_token(conn, secret=token["secret"])
    # Nothing else changed: the account is still provisioned, the token unused, Bob's token untouched.
    assert _account(conn, ada)["status"] == "provisioned" and _account(conn, ada)["activated_at"] is None
    assert [t["consumed_at"] for t in _tokens(conn, ada)] == [None]
    assert _attempts(conn, ada) == [5] and _attempts(conn, bob) == [0]
    # The database holds the line for every writer: a locked token is not consumed, its count not reset.
    with pytest.raises(psycopg.errors.CheckViolation, match="locked after 5 wrong codes"):
        conn.execute("UPDATE mailroom.tokens SET consumed_at = now() WHERE id = %s", (token["id"],))
    conn.rollback()
    with pytest.raises(psycopg.errors.CheckViolation, match="cannot forget its wrong codes"):
        conn.execute("UPDATE mailroom.tokens SET failed_attempts = 0 WHERE id = %s", (token["id"],))
    conn.rollback()
    # The remedy: a new token, with its own five tries.
    resend_activation(conn, [ada], settings)
    conn.commit()
    fresh = _tokens(conn, ada)[-1]
    conn.commit()
    assert consume_token(conn, code=fresh["code"], email="ada@example.com").account_status == "active"


async def test_the_mailer_skips_a_locked_token(db_url: str, conn: Conn, settings: Settings) -> None:
    ada = create_account(conn, "ada@example.com", "ada", settings=settings)
    conn.commit()
    [token] = _tokens(conn, ada)
    conn.commit()
    for n in range(1, 6):
        with pytest.raises(TokenError):
            consume_token(conn, code=f"{(int(token['code']) + n) % 100000:05d}", email="ada@example.com")
    mailed, skipped = await _mail_all(db_url, settings)
    assert mailed == {} and skipped == {token["id"]: "locked after too many wrong codes"}


async def test_only_the_mailer_reads_a_plain_secret_and_the_link_works_by_its_hash(
    db_url: str, conn: Conn, settings: Settings
) -> None:
    ada = create_account(conn, "ada@example.com", "ada", settings=settings)
    conn.commit()
    [before] = _tokens(conn, ada)
    assert before["secret_hash"] == hashlib.sha256(before["secret"]).digest()
    # Until the mailer handled it, no writer may forget the secret or change it.
    with pytest.raises(psycopg.errors.CheckViolation, match='constraint "tokens_secret_until_handled"'):
        conn.execute("UPDATE mailroom.tokens SET secret = NULL WHERE id = %s", (before["id"],))
    conn.rollback()
    with pytest.raises(psycopg.errors.CheckViolation, match="cannot change its secret"):
        conn.execute(
            "UPDATE mailroom.tokens SET secret = mailroom.random_secret() WHERE id = %s", (before["id"],)
        )
    conn.rollback()

    mailed, _ = await _mail_all(db_url, settings)
    [after] = _tokens(conn, ada)
    email = conn.execute(
        "SELECT text_body FROM mailroom.email_queue WHERE id = %s", (mailed[after["id"]],)
    ).fetchone()
    conn.commit()
    assert after["secret"] is None and after["secret_hash"] == before["secret_hash"]
    assert email is not None
    match = re.search(r"/activate\?token=([0-9a-f]{64})", email["text_body"])
    assert match is not None and bytes.fromhex(match.group(1)) == before["secret"]
    # The link from the email activates the account, though the database no longer holds its secret.
    assert consume_token(conn, secret=match.group(1), action="activation").account_status == "active"


def test_upgrading_keeps_mailed_links_working_and_forgets_their_secrets(empty_db_url: str) -> None:
    from worker.core import db

    db.upgrade(empty_db_url, "0001")
    with psycopg.connect(empty_db_url, row_factory=dict_row) as old:
        old.execute(
            "INSERT INTO mailroom.accounts (email, login) VALUES ('a@example.com', 'a'), ('b@example.com', 'b')"
        )
        old.execute("UPDATE mailroom.tokens SET mailed_at = now() WHERE account_id = 1")
        secrets = {
            r["account_id"]: r["secret"]
            for r in old.execute("SELECT account_id, secret FROM mailroom.tokens")
        }
        old.commit()
    db.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url, row_factory=dict_row) as new:
        rows = {r["account_id"]: r for r in new.execute("SELECT * FROM mailroom.tokens").fetchall()}
        new.commit()
        assert rows[1]["secret"] is None and rows[2]["secret"] == secrets[2]  # b's token is not mailed yet
        assert {r["secret_hash"] for r in rows.values()} == {
            hashlib.sha256(s).digest() for s in secrets.values()
        }
        assert consume_token(new, secret=secrets[1]).account_status == "active"


def test_parallel_wrong_guesses_cannot_outrun_the_count(db_url: str, conn: Conn, settings: Settings) -> None:
    ada = create_account(conn, "ada@example.com", "ada", settings=settings)
    conn.commit()
    [token] = _tokens(conn, ada)
    conn.commit()
    refusals: list[str] = []

    def guess(n: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as own:
            try:
                consume_token(own, code=f"{(int(token['code']) + n) % 100000:05d}", email="ada@example.com")
            except TokenError as exc:
                refusals.append(str(exc))

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(1, 21)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The token's row lock serialises the guesses: exactly five were counted, the rest found it locked.
    assert len(refusals) == 20 and _attempts(conn, ada) == [5]
    assert sum("locked after 5 wrong codes" in r for r in refusals) == 16
    with pytest.raises(TokenError, match="locked after 5 wrong codes"):
        consume_token(conn, code=token["code"], email="ada@example.com")
