"""Enqueue checks the suppression list: an email to a suppressed address is stored `suppressed` at once
and the caller is told, through the Python API, the SQL function and the bulk command line; tenants
(application roles) can neither read nor lift the list."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

import mailroom
from mailroom import EmailRequest
from tests.cli import run
from tests.fixtures_db import drop_roles, role_url
from tests.ops.suppression_helpers import list_bounce, listed
from worker.core.config import Settings
from worker.ops import roles


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public API reads `MAILROOM_*` itself: each test starts from the defaults."""
    for name in [n for n in os.environ if n.startswith("MAILROOM_")]:
        monkeypatch.delenv(name)


def _email(to: str | list[str] = "ada@example.com", **more: Any) -> EmailRequest:
    return EmailRequest(to=to, subject="Your order", text="Thank you.", **more)


def _state(db_url: str, email_id: int) -> tuple[Any, ...]:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status, suppression_reason, finished_at IS NOT NULL FROM mailroom.email_queue WHERE id = %s",
            (email_id,),
        ).fetchone()
    assert row is not None
    return tuple(row)


def _unsubscribe(db_url: str, address: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO mailroom.unsubscribe_list (email, source) VALUES (%s, 'link')", (address,))


def test_an_email_to_a_hard_bounced_address_is_stored_suppressed_and_the_caller_told(db_url: str) -> None:
    list_bounce(db_url, "ada@example.com")
    with psycopg.connect(db_url) as conn:
        email_id = mailroom.enqueue(conn, _email("Ada@EXAMPLE.com"))
        fine = mailroom.enqueue(conn, _email("bob@example.com"))
    assert isinstance(email_id, int) and isinstance(email_id, mailroom.Enqueued)
    assert email_id.suppressed and email_id.suppression_reason == "on the bounce list (hard)"
    assert not fine.suppressed and fine.suppression_reason is None
    assert _state(db_url, email_id) == ("suppressed", "on the bounce list (hard)", True)
    assert _state(db_url, fine)[0] == "pending"
    # still the id it always was: it compares, hashes, formats and pickles as one
    assert (
        email_id == int(email_id)
        and f"{email_id}" == str(int(email_id))
        and {int(email_id): 1}[email_id] == 1
    )
    again = pickle.loads(pickle.dumps(email_id))  # noqa: S301 (our own bytes)
    assert again == email_id and again.suppression_reason == email_id.suppression_reason
    assert "suppressed" in repr(email_id)


def test_an_unsubscribe_suppresses_campaign_email_but_not_transactional_email(db_url: str) -> None:
    _unsubscribe(db_url, "ada@example.com")
    with psycopg.connect(db_url) as conn:
        receipt = mailroom.enqueue(conn, _email())
        many = mailroom.enqueue_many(conn, [_email(), _email(transactional=False), _email("bob@example.com")])
    assert not receipt.suppressed  # transactional (the default): an unsubscribe does not stop it
    assert [m.suppression_reason for m in many] == [None, "unsubscribed", None]
    assert _state(db_url, many[1])[:2] == ("suppressed", "unsubscribed")


def test_a_soft_bounce_under_three_is_a_hold_not_a_suppression(db_url: str) -> None:
    list_bounce(db_url, "ada@example.com", kind="soft")
    with psycopg.connect(db_url) as conn:
        assert not mailroom.enqueue(conn, _email()).suppressed
        conn.execute("UPDATE mailroom.bounce_list SET bounce_count = 3")
        assert mailroom.enqueue(conn, _email()).suppression_reason == "on the bounce list (soft, 3 times)"


def test_an_email_with_several_recipients_is_suppressed_only_when_all_are(db_url: str) -> None:
    list_bounce(db_url, "ada@example.com")
    list_bounce(db_url, "bob@example.com", kind="complaint")
    with psycopg.connect(db_url) as conn:
        some = mailroom.enqueue(conn, _email(["ada@example.com", "carol@example.com"]))
        every = mailroom.enqueue(conn, _email(["ada@example.com"], cc=["BOB@example.com"]))
    assert not some.suppressed  # carol still gets hers; the claim drops ada's copy
    assert every.suppression_reason == "every recipient suppressed; the first: on the bounce list (hard)"


def test_a_repeated_idempotency_key_reports_the_first_emails_suppression(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        first = mailroom.enqueue(conn, _email(idempotency_key="k1"))
    list_bounce(db_url, "ada@example.com")
    with psycopg.connect(db_url) as conn:
        again = mailroom.enqueue(conn, _email(idempotency_key="k1"))
        key2 = mailroom.enqueue(conn, _email(idempotency_key="k2"))
        repeat = mailroom.enqueue_many(conn, [_email(idempotency_key="k2")])
    assert again == first and not again.suppressed  # stored pending before the bounce: the claim decides
    assert key2.suppressed and repeat == [key2] and repeat[0].suppressed


async def test_the_async_api_tells_the_same(db_url: str) -> None:
    list_bounce(db_url, "ada@example.com", kind="manual", reason="legal request")
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        one = await mailroom.enqueue_async(conn, _email())
        [two] = await mailroom.enqueue_many_async(conn, [_email("ADA@example.COM")])
    assert one.suppression_reason == two.suppression_reason == "suppressed by an operator (manual)"


def test_sql_enqueue_is_suppressed_at_once_and_enqueue_outcome_says_so(db_url: str) -> None:
    list_bounce(db_url, "ada@example.com", kind="complaint")
    with psycopg.connect(db_url) as conn:
        # the existing call keeps returning the id ...
        first = conn.execute(
            "SELECT mailroom.enqueue(recipients => ARRAY['  Ada@Example.com'], subject => 's', text_body => 'b')"
        ).fetchone()
        assert first is not None
        email_id = int(first[0])
        # ... and the outcome is one call away, in the same statement
        outcome = conn.execute(
            "SELECT * FROM mailroom.enqueue_outcome(mailroom.enqueue(recipients => ARRAY['ada@example.com'],"
            " subject => 's', text_body => 'b'))"
        ).fetchone()
        fine = conn.execute(
            "SELECT suppressed, status FROM mailroom.enqueue_outcome(mailroom.enqueue("
            "recipients => ARRAY['bob@example.com'], subject => 's', text_body => 'b'))"
        ).fetchone()
    assert _state(db_url, email_id)[:2] == ("suppressed", "on the bounce list (complaint)")
    assert outcome is not None and outcome[1:] == ("suppressed", True, "on the bounce list (complaint)")
    assert fine == (False, "pending")


def test_a_template_email_from_sql_waits_for_the_claim(db_url: str) -> None:
    # Stored unrendered: the claim, after rendering, suppresses it (unrendered cannot turn suppressed).
    list_bounce(db_url, "ada@example.com")
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status FROM mailroom.enqueue_outcome(mailroom.enqueue(recipients => ARRAY['ada@example.com'],"
            " template => 'welcome', template_data => '{}'))"
        ).fetchone()
    assert row == ("unrendered",)


def test_bulk_enqueue_lines_say_which_emails_were_suppressed(
    capsys: pytest.CaptureFixture[str], db_url: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    list_bounce(db_url, "ada@example.com")
    lines = tmp_path / "mail.jsonl"
    lines.write_text(
        "\n".join(
            json.dumps({"to": to, "subject": "s", "text": "t"})
            for to in ("ada@example.com", "bob@example.com", "ADA@example.com")
        )
        + "\n",
        encoding="utf-8",
    )
    code, out, err = run(capsys, "enqueue", str(lines), "--no-progress")
    assert code == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert [r.get("suppressed") for r in results] == [
        "on the bounce list (hard)",
        None,
        "on the bounce list (hard)",
    ]
    assert [_state(db_url, r["id"])[0] for r in results] == ["suppressed", "pending", "suppressed"]


# --- tenants: application roles share the database, not the list ------------------------------------


def _as(db_url: str, role: str) -> psycopg.Connection[Any]:
    return psycopg.connect(role_url(db_url, role))


@pytest.fixture
def tenants(db_url: str, role_lock: None) -> Iterator[tuple[str, str, str]]:
    names = ("mr_sup_shop", "mr_sup_blog", "mr_sup_reader")
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "app", names[0], create=True, actor="tester")
        roles.grant(conn, "app", names[1], create=True, actor="tester")
        roles.grant(conn, "read-only", names[2], create=True, actor="tester")
    yield names
    drop_roles(db_url, *names)


def test_a_tenant_cannot_read_add_or_lift_suppressions(db_url: str, tenants: tuple[str, str, str]) -> None:
    _, blog, _ = tenants
    list_bounce(db_url, "ada@example.com", kind="complaint")
    attempts = [
        "SELECT * FROM mailroom.suppressions",
        "SELECT * FROM mailroom.suppression_events",
        "SELECT email FROM mailroom.bounce_list",
        "DELETE FROM mailroom.bounce_list WHERE email = 'ada@example.com'",
        "DELETE FROM mailroom.unsubscribe_list",
        "INSERT INTO mailroom.unsubscribe_list (email) VALUES ('x@example.com')",
        "UPDATE mailroom.suppression_events SET reason = 'forged'",
        "SELECT mailroom.suppression_reason('ada@example.com', false)",
        "SELECT mailroom.enqueue_suppression('pending', 'ada@example.com', NULL, NULL, NULL, false)",
    ]
    for statement in attempts:
        with _as(db_url, blog) as conn, pytest.raises(errors.InsufficientPrivilege):
            conn.execute(statement)
    # nor forge an operator's audit row saying it lifted one
    with _as(db_url, blog) as conn, pytest.raises(errors.InvalidParameterValue):
        conn.execute("SELECT mailroom.app_audit('suppression.remove', 'ops', 'ada@example.com')")
    assert listed(db_url) == {"ada@example.com": "complaint"}


def test_a_tenant_learns_its_own_emails_outcome_and_nothing_of_anothers(
    db_url: str, tenants: tuple[str, str, str]
) -> None:
    shop, blog, _ = tenants
    list_bounce(db_url, "ada@example.com")
    enqueue = (
        "SELECT mailroom.enqueue(recipients => ARRAY['ada@example.com'], subject => 's', text_body => 'b')"
    )
    with _as(db_url, shop) as conn:
        row = conn.execute(enqueue).fetchone()
        assert row is not None
        shop_email = int(row[0])
        assert conn.execute(
            "SELECT suppressed FROM mailroom.enqueue_outcome(%s)", (shop_email,)
        ).fetchone() == (True,)
    with _as(db_url, blog) as conn:  # another tenant asking about shop's email: no row, as if none existed
        assert conn.execute("SELECT * FROM mailroom.enqueue_outcome(%s)", (shop_email,)).fetchall() == []
        assert (
            conn.execute("SELECT * FROM mailroom.enqueue_outcome(%s)", (shop_email + 1000,)).fetchall() == []
        )


def test_the_read_only_role_reads_the_list_and_history_and_changes_nothing(
    db_url: str, tenants: tuple[str, str, str]
) -> None:
    _, _, reader = tenants
    list_bounce(db_url, "ada@example.com")
    with _as(db_url, reader) as conn:
        assert conn.execute("SELECT address, kind FROM mailroom.suppressions").fetchall() == [
            ("ada@example.com", "hard")
        ]
        assert conn.execute("SELECT change, source FROM mailroom.suppression_events").fetchall() == [
            ("listed", "smtp")
        ]
    for statement in (
        "DELETE FROM mailroom.bounce_list",
        "DELETE FROM mailroom.suppression_events",
        "SELECT * FROM mailroom.enqueue_outcome(1)",
    ):
        with _as(db_url, reader) as conn, pytest.raises(errors.InsufficientPrivilege):
            conn.execute(statement)


# Three addresses another tenant's mail (or an operator) listed, each of another kind.
LISTED = {"c@example.com": "complaint", "h@example.com": "hard", "m@example.com": "manual"}
TOLD = "suppressed: the address is on the suppression list (an operator can say why)"


def _list_all(db_url: str) -> None:
    for address, kind in LISTED.items():
        list_bounce(db_url, address, kind=kind)


def test_an_application_is_told_its_email_will_not_be_sent_never_why(
    db_url: str, tenants: tuple[str, str, str], capsys: pytest.CaptureFixture[str], cli_env: dict[str, str]
) -> None:
    shop, _, _ = tenants
    _list_all(db_url)
    enqueue = (
        "SELECT * FROM mailroom.enqueue_outcome(mailroom.enqueue(recipients => ARRAY[%s], subject => 's',"
        " text_body => 'b'))"
    )
    told: list[tuple[Any, ...]] = []
    with _as(db_url, shop) as conn:
        for address in LISTED:  # the probe: enqueue, ask, roll back
            told.append(tuple(conn.execute(enqueue, (address,)).fetchone() or ()))
            conn.rollback()
        kept = conn.execute(enqueue, ("h@example.com",)).fetchone()
        conn.commit()
        mine = conn.execute("SELECT suppression_reason, last_error FROM mailroom.my_emails").fetchall()
    assert [t[1:] for t in told] == [("suppressed", True, TOLD)] * len(LISTED)
    assert kept is not None and kept[3] == TOLD and mine == [(TOLD, None)]
    # The queue keeps the reason for operators, who read it wherever they look.
    assert _state(db_url, kept[0])[:2] == ("suppressed", "on the bounce list (hard)")
    code, out, _ = run(capsys, "suppressions", "list")
    assert code == 0 and all(kind in out for kind in LISTED.values()), out


@pytest.mark.usefixtures("role_lock")
def test_a_role_writing_the_queue_through_the_python_api_learns_no_kind(
    db_url: str, settings: Settings
) -> None:
    """An application role that may also write the queue (the bulk command's COPY), without the list's
    privileges: the Python API's door, its lookup by key, the batch, and the bulk path."""
    _list_all(db_url)
    with psycopg.connect(db_url) as conn:
        conn.execute("CREATE ROLE mr_sup_writer LOGIN")
        for grant in (
            "SELECT mailroom.grant_app_role('mr_sup_writer')",
            "GRANT SELECT, INSERT ON mailroom.email_queue, mailroom.tracked_links TO mr_sup_writer",
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA mailroom TO mr_sup_writer",
            "GRANT EXECUTE ON FUNCTION mailroom.enqueue_suppression TO mr_sup_writer",
            # what the batch path reads first: templates and the campaigns' settings
            "GRANT SELECT ON mailroom.templates, mailroom.campaigns TO mr_sup_writer",
            "GRANT SELECT (postal_address) ON mailroom.sender_accounts TO mr_sup_writer",
        ):
            conn.execute(grant)
    try:
        with _as(db_url, "mr_sup_writer") as conn:
            one = [mailroom.enqueue(conn, _email(a, idempotency_key=a)) for a in LISTED]
            again = mailroom.enqueue_many(conn, [_email(a, idempotency_key=a) for a in LISTED])
            many = mailroom.enqueue_many(conn, [_email(a) for a in LISTED])
        lines = _bulk_as_writer(db_url, settings)
        for email in (*one, *again, *many):
            assert email.suppressed and email.suppression_reason == TOLD, repr(email)
        assert again == one  # the lookup by key answered
        assert lines and all(line.get("suppressed") == TOLD for line in lines), lines
        with psycopg.connect(db_url) as conn:  # an operator's own enqueue is told why
            assert mailroom.enqueue(conn, _email("m@example.com")).suppression_reason == (
                "suppressed by an operator (manual)"
            )
    finally:
        drop_roles(db_url, "mr_sup_writer")


def _bulk_as_writer(db_url: str, settings: Settings) -> list[dict[str, Any]]:
    """`mailroom enqueue`'s batch path (worker.core.bulk) as the writer: each result line, decoded."""
    from worker.core import bulk

    results: list[str] = []
    lines = [(n, json.dumps({"to": a, "subject": "s", "text": "t"})) for n, a in enumerate(LISTED, 1)]
    bulk.enqueue_lines(
        role_url(db_url, "mr_sup_writer"),
        lines,
        settings,
        lambda done: results.extend(text for _, text in done),
        jobs=1,
    )
    return [json.loads(text) for text in results]


@pytest.mark.parametrize("binary", [False, True])
def test_enqueued_ids_go_into_sql_lists_as_bigints_whatever_their_size(db_url: str, binary: bool) -> None:
    # psycopg dumps an int subclass in a list with the dumper of the list's last item: an int2 for 1.
    ids = [mailroom.Enqueued(40_000), mailroom.Enqueued(3_000_000_000), mailroom.Enqueued(1)]
    with psycopg.connect(db_url) as conn:
        got = conn.execute("SELECT %s::bigint[]", (ids,), binary=binary).fetchone()
    assert got == ([40_000, 3_000_000_000, 1],)
