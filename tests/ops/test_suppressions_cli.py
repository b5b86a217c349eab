"""`mailroom suppressions list|history|add|remove` and `bounces list`: one history however events arrived,
changes audited, a complaint lifted only on purpose, addresses matched in any form."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.cli import run
from tests.ops.suppression_helpers import audit_rows, events, list_bounce, listed
from tests.worker.helpers import add_sender, enqueue_many, run_until_drained
from worker.core.config import Settings
from worker.devtools.sink import RunningSink

pytestmark = pytest.mark.usefixtures("cli_env")


async def test_a_refusal_during_the_smtp_session_is_in_bounces_list_and_the_history(
    capsys: pytest.CaptureFixture[str], db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    # The relay refuses the mailbox at RCPT: the worker lists the address, no DSN ever comes.
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_rcpt("u0@example.com", "550 5.1.1 User unknown")
    enqueue_many(db_url, 1)
    await run_until_drained(db_url, settings)
    assert listed(db_url) == {"u0@example.com": "hard"}

    code, out, _ = run(capsys, "bounces", "list")
    assert code == 0 and "no bounce or complaint recorded" not in out
    assert "u0@example.com" in out and "smtp" in out and "5.1.1" in out
    code, out, _ = run(capsys, "bounces", "list", "--json")
    [item] = json.loads(out)
    assert (item["recipient"], item["kind"], item["change"], item["source"]) == (
        "u0@example.com",
        "hard",
        "listed",
        "smtp",
    )
    assert (item["sender"], item["status"]) == ("primary", "5.1.1")
    code, out, _ = run(capsys, "suppressions", "history", "U0@Example.COM", "--json")
    assert [(i["change"], i["source"]) for i in json.loads(out)] == [("listed", "smtp")]


def test_list_filters_by_kind_and_search_and_says_what_each_stops(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    list_bounce(db_url, "hard@example.com")
    list_bounce(db_url, "soft@example.org", kind="soft", reason="452 mailbox full")
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.unsubscribe_list (email, source) VALUES ('gone@example.com', 'link')"
        )
    code, out, _ = run(capsys, "suppressions", "list", "--json")
    stops = {i["address"]: (i["kind"], i["stops"]) for i in json.loads(out)}
    assert stops == {
        "hard@example.com": ("hard", "all email"),
        "soft@example.org": ("soft", "held a day after each bounce"),
        "gone@example.com": ("unsubscribe", "non-transactional email"),
    }
    code, out, _ = run(capsys, "suppressions", "list", "--kind", "unsubscribe")
    assert "gone@example.com" in out and "hard@example.com" not in out
    code, out, _ = run(capsys, "suppressions", "list", "--search", "EXAMPLE.ORG")
    assert "soft@example.org" in out and "hard@example.com" not in out
    code, out, _ = run(capsys, "suppressions", "list", "--search", "mailbox full")  # the reason
    assert "soft@example.org" in out
    # the search's own wildcards are literal: % and _ match nothing here
    code, out, _ = run(capsys, "suppressions", "list", "--search", "%")
    assert code == 0 and out.strip() == "no address is suppressed that matches"
    code, out, _ = run(capsys, "suppressions", "list", "--search", "_")
    assert out.strip() == "no address is suppressed that matches"


@pytest.mark.parametrize(
    "given",
    ["Ada@Example.COM", "  ada@example.com  ", "ADA@EXAMPLE.COM"],
)
def test_add_matches_every_form_of_an_address_and_stops_email_at_enqueue(
    capsys: pytest.CaptureFixture[str], db_url: str, given: str
) -> None:
    code, out, _ = run(capsys, "suppressions", "add", given, "--reason", "asked by phone")
    assert code == 0 and out.strip() == "suppressions: ada@example.com suppressed"
    assert listed(db_url) == {"ada@example.com": "manual"}
    code, out, _ = run(capsys, "suppressions", "add", "ada@EXAMPLE.com", "--reason", "again")
    assert out.strip() == "suppressions: ada@example.com already suppressed, left as it was"
    code, out, _ = run(capsys, "suppressions", "history", "ADA@example.com", "--json")
    [event] = json.loads(out)
    assert (event["change"], event["kind"], event["source"], event["reason"]) == (
        "listed",
        "manual",
        "operator",
        "asked by phone",
    )
    [(action, _, target, detail)] = audit_rows(db_url, "suppression.")
    assert action == "suppression.add" and "ada@example.com" not in target  # masked in the audit trail
    assert detail["reason"] == "asked by phone"


def test_an_internationalised_domain_is_one_address_in_either_form(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    code, out, _ = run(capsys, "suppressions", "add", "ada@Bücher.example", "--reason", "r")
    assert code == 0 and "ada@xn--bcher-kva.example" in out
    code, out, _ = run(capsys, "suppressions", "remove", "ADA@XN--BCHER-KVA.EXAMPLE", "--reason", "r")
    assert code == 0 and listed(db_url) == {}


def test_add_refuses_what_is_not_an_address_or_a_reason(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    code, _, err = run(capsys, "suppressions", "add", "not-an-address", "--reason", "r")
    assert code == 2 and "address" in err
    code, _, err = run(capsys, "suppressions", "add", "a@example.com", "--reason", "line\r\nX-Injected: 1")
    assert code == 2 and "reason" in err
    code, _, err = run(capsys, "suppressions", "add", "a@example.com", "--reason", "   ")
    assert code == 2 and "reason" in err
    assert listed(db_url) == {} and audit_rows(db_url, "suppression.") == []


def test_lifting_a_complaint_needs_force_and_says_why(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    list_bounce(db_url, "angry@example.com", kind="complaint", reason="abuse report")
    code, out, err = run(capsys, "suppressions", "remove", "angry@example.com", "--reason", "oops")
    assert code == 1 and "spam" in err and "--force" in err and "complaint" in err
    assert listed(db_url) == {"angry@example.com": "complaint"}  # nothing changed
    assert audit_rows(db_url, "suppression.") == []
    code, out, _ = run(
        capsys, "suppressions", "remove", "angry@example.com", "--reason", "asked to be mailed", "--force"
    )
    assert code == 0 and "lifted complaint" in out
    assert listed(db_url) == {}
    [(action, _, _, detail)] = audit_rows(db_url, "suppression.")
    assert action == "suppression.remove" and detail["forced"] is True and detail["kinds"] == ["complaint"]
    changes = [(c, k, s, r) for c, k, s, r, _ in events(db_url, "angry@example.com")]
    assert changes == [
        ("listed", "complaint", "smtp", "abuse report"),
        ("lifted", "complaint", "operator", "asked to be mailed"),
    ]


def test_remove_lifts_both_lists_and_an_unknown_address_exits_1(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    list_bounce(db_url, "ada@example.com")
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.unsubscribe_list (email, source) VALUES ('ada@example.com', 'one_click')"
        )
    code, out, _ = run(capsys, "suppressions", "remove", "Ada@example.com", "--reason", "fixed")
    assert code == 0 and "hard" in out and "unsubscribe" in out and listed(db_url) == {}
    code, _, err = run(capsys, "suppressions", "remove", "ada@example.com", "--reason", "fixed")
    assert code == 1 and "not suppressed" in err
    code, out, _ = run(capsys, "bounces", "list", "--json")
    kinds = [(i["change"], i["kind"], i["source"]) for i in json.loads(out)]
    assert kinds == [
        ("lifted", "unsubscribe", "operator"),
        ("lifted", "hard", "operator"),
        ("listed", "unsubscribe", "one_click"),
        ("listed", "hard", "smtp"),
    ]
    code, out, _ = run(capsys, "bounces", "list", "--kind", "unsubscribe", "--json")
    assert len(json.loads(out)) == 2


def test_history_shows_outside_text_escaped(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    list_bounce(db_url, "ada@example.com", reason="550 \x1b]0;pwned\x07 no such user")
    code, out, _ = run(capsys, "suppressions", "history", "ada@example.com")
    assert code == 0 and "\x1b" not in out and "\\x1b]0;pwned\\x07" in out
    code, out, _ = run(capsys, "suppressions", "list")
    assert "\x1b" not in out


def test_history_of_nothing_and_of_a_non_address(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    code, out, _ = run(capsys, "suppressions", "history", "nobody@example.com")
    assert code == 0 and out.strip() == "nothing recorded for nobody@example.com"
    code, _, err = run(capsys, "suppressions", "history", "nobody")
    assert code == 2 and "address" in err


async def test_an_address_suppressed_after_enqueue_is_still_dropped_at_claim(
    capsys: pytest.CaptureFixture[str], db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    [email_id] = enqueue_many(db_url, 1)
    code, _, _ = run(capsys, "suppressions", "add", "u0@example.com", "--reason", "legal request")
    assert code == 0
    assert await run_until_drained(db_url, settings) == 0
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status, suppression_reason FROM mailroom.email_queue WHERE id = %s", (email_id,)
        ).fetchone()
    assert row == ("suppressed", "suppressed by an operator (manual)")
    assert smtp_sink.messages == []
