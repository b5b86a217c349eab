"""The order-event inbox: one inbox row and one email per (message id, consumer), however often it arrives."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.producers.helpers import placed
from tests.worker.helpers import add_sender, run_until_drained
from worker.core.config import Settings
from worker.core.validation import ValidationError
from worker.devtools.sink import RunningSink
from worker.producers.inbox import ingest_event


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM mailroom.inbox) AS inbox, (SELECT count(*) FROM mailroom.email_queue) AS q"
    ).fetchone()
    assert row is not None
    return int(row["inbox"]), int(row["q"])


def test_event_is_recorded_and_its_personalised_email_enqueued(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    result = ingest_event(conn, "m-1", "shop", "order_placed", placed(), settings=settings)
    assert not result.duplicate
    inbox = conn.execute("SELECT * FROM mailroom.inbox").fetchone()
    email = conn.execute("SELECT * FROM mailroom.email_queue").fetchone()
    assert inbox is not None and email is not None
    assert (inbox["message_id"], inbox["consumer"], inbox["event_type"]) == ("m-1", "shop", "order_placed")
    assert inbox["email_id"] == result.email_id == email["id"] and inbox["processed_at"] is not None
    assert email["recipient_email"] == "ada@example.com" and email["recipient_name"] == "Ada Lovelace"
    assert email["subject"] == "Your order A-1001 is confirmed"
    assert "Hello Ada Lovelace," in email["text_body"]
    assert "2 x Analytical Engine manual  25.00 EUR" in email["text_body"]
    assert "1 x Punched cards  1,200.00 EUR" in email["text_body"]
    assert "Total: 1,225.00 EUR" in email["text_body"]
    assert "<td>Punched cards</td>" in email["html_body"]
    assert (email["template"], email["reference_type"], email["reference_id"]) == (
        "order_placed",
        "order_placed",
        "A-1001",
    )


@pytest.mark.parametrize(
    ("event_type", "subject", "phrase"),
    [
        ("order_placed", "Votre commande A-1001 est confirmée", "Total : 1\u202f225,00 EUR"),
        ("order_completed", "Votre commande A-1001 est terminée", "Merci de votre confiance."),
        ("order_cancelled", "Votre commande A-1001 a été annulée", "Motif : rupture de stock"),
    ],
)
def test_each_order_event_has_a_french_email(
    conn: psycopg.Connection[Any], settings: Settings, event_type: str, subject: str, phrase: str
) -> None:
    payload = placed(locale="fr", reason="rupture de stock")
    ingest_event(conn, "m-fr", "shop", event_type, payload, settings=settings)
    email = conn.execute("SELECT subject, text_body, html_body, locale FROM mailroom.email_queue").fetchone()
    assert email is not None
    assert (email["subject"], email["locale"]) == (subject, "fr")
    assert "Bonjour Ada Lovelace," in email["text_body"] and phrase in email["text_body"]
    assert "Ada Lovelace" in email["html_body"]


def test_cancelled_order_needs_no_items(conn: psycopg.Connection[Any], settings: Settings) -> None:
    payload = placed()
    del payload["items"]
    ingest_event(conn, "m-c", "shop", "order_cancelled", payload, settings=settings)
    email = conn.execute("SELECT subject, text_body FROM mailroom.email_queue").fetchone()
    assert email is not None
    assert email["subject"] == "Your order A-1001 has been cancelled"
    assert "(total 1,225.00 EUR) has been cancelled." in email["text_body"]
    assert "Cancelled items" not in email["text_body"]


def test_replayed_event_creates_nothing_and_is_counted(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    first = ingest_event(conn, "m-1", "shop", "order_placed", placed(), settings=settings)
    again = ingest_event(conn, "m-1", "shop", "order_placed", placed(), settings=settings)
    other_consumer = ingest_event(conn, "m-1", "billing", "order_placed", placed(), settings=settings)
    assert again.duplicate and again.email_id == first.email_id
    assert not other_consumer.duplicate and other_consumer.email_id != first.email_id
    assert counts(conn) == (2, 2)
    row = conn.execute("SELECT receive_count FROM mailroom.inbox WHERE consumer = 'shop'").fetchone()
    assert row == {"receive_count": 2}


BAD_EVENTS: list[tuple[str, dict[str, Any], str]] = [
    ("order_shipped", placed(), "type"),
    ("order_placed", {k: v for k, v in placed().items() if k != "customer_name"}, "payload.customer_name"),
    ("order_placed", placed(items=[]), "payload.items"),
    ("order_completed", {k: v for k, v in placed().items() if k != "total"}, "payload.total"),
    ("order_placed", placed(total="lots"), "payload.total"),
    ("order_placed", placed(items=[{"name": "x", "quantity": 0}]), "payload.items[0].quantity"),
    ("order_placed", placed(email="not an address"), "to"),
    ("order_placed", placed(customer_name="Ada\r\nBcc: x@example.com"), "payload.customer_name"),
    ("order_placed", placed(currency="euro"), "payload.currency"),
    ("order_placed", placed(locale="français"), "payload.locale"),
]


def test_bad_events_are_rejected_with_nothing_stored(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    # One database for every case: each must leave it exactly as empty as it found it.
    for event_type, payload, field in BAD_EVENTS:
        with pytest.raises(ValidationError) as caught:
            ingest_event(conn, "m-bad", "shop", event_type, payload, settings=settings)
        assert caught.value.field == field, (event_type, payload)
        conn.commit()
        assert counts(conn) == (0, 0)


@pytest.mark.parametrize(
    ("locale", "subject"),
    [
        ("pt-BR", "Your order A-1001 is confirmed"),  # no Portuguese templates: the default, not a rejection
        ("xx", "Your order A-1001 is confirmed"),
        ("fr_FR", "Votre commande A-1001 est confirmée"),  # as shops write it
        ("FR-fr", "Votre commande A-1001 est confirmée"),
    ],
)
def test_unknown_or_shop_written_locale_still_gets_its_email(
    conn: psycopg.Connection[Any], settings: Settings, locale: str, subject: str
) -> None:
    ingest_event(conn, "m-1", "shop", "order_placed", placed(locale=locale), settings=settings)
    email = conn.execute("SELECT subject FROM mailroom.email_queue").fetchone()
    assert email == {"subject": subject}


# Values a JSON parser accepts but PostgreSQL or the money formatting cannot take: each used to end
# `mailroom orders ingest` with a traceback (and stop the rest of the stream) instead of a clear error.
UNSTORABLE: list[tuple[dict[str, Any], str]] = [
    (placed(note=float("inf")), "payload"),
    (placed(note=float("nan")), "payload"),
    (placed(note="a\x00b"), "payload"),
    (placed(items=[{"name": "x", "quantity": 1, "unit_price": "1e999999"}]), "payload.items[0].unit_price"),
    (placed(items=[{"name": "x", "quantity": 1, "unit_price": float("nan")}]), "payload.items[0].unit_price"),
    (placed(items=[{"name": "x", "quantity": 10**25}]), "payload.items[0].quantity"),
    (placed(total="1e20"), "payload.total"),
    (placed(order_number="A-1\nBcc: x@example.com"), "payload.order_number"),
]


def test_values_the_database_cannot_store_are_rejected_with_nothing_stored(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    for payload, field in UNSTORABLE:
        with pytest.raises(ValidationError) as caught:
            ingest_event(conn, "m-bad", "shop", "order_placed", payload, settings=settings)
        assert caught.value.field == field, payload
        conn.commit()
        assert counts(conn) == (0, 0)


def test_keys_with_a_nul_character_are_rejected_with_nothing_stored(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    for message_id, consumer, field in (("m\x001", "shop", "message_id"), ("m-1", "sh\x00op", "consumer")):
        with pytest.raises(ValidationError) as caught:
            ingest_event(conn, message_id, consumer, "order_placed", placed(), settings=settings)
        assert caught.value.field == field
        conn.commit()
        assert counts(conn) == (0, 0)


def test_ingest_cli_goes_on_after_a_line_with_an_infinite_number(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from worker.cli.main import main

    good = {"message_id": "m-1", "type": "order_placed", "payload": placed()}
    # 1e400 is a valid JSON number that Python reads as infinity, which jsonb refuses.
    bad = json.dumps({**good, "message_id": "m-0"}).replace(
        '"currency": "eur"', '"currency": "eur", "note": 1e400'
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO(bad + "\n" + json.dumps(good) + "\n"))
    assert main(["orders", "ingest"]) == 1
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert results[0]["line"] == 1 and results[0]["field"] == "payload" and "infinite" in results[0]["error"]
    assert results[1]["line"] == 2 and results[1]["duplicate"] is False
    assert counts(conn) == (1, 1)


def test_event_in_callers_transaction_rolls_back_with_it(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    with conn.transaction(force_rollback=True):
        ingest_event(conn, "m-1", "shop", "order_placed", placed(), settings=settings)
        assert counts(conn) == (1, 1)
    assert counts(conn) == (0, 0)
    ingest_event(conn, "m-1", "shop", "order_placed", placed(), settings=settings)
    assert counts(conn) == (1, 1)


def _events(n: int) -> list[dict[str, Any]]:
    return [
        {
            "message_id": f"evt-{i}",
            "consumer": "shop",
            "type": "order_placed",
            "payload": placed(f"c{i}@example.com"),
        }
        for i in range(n)
    ]


@pytest.mark.e2e
def test_concurrent_duplicates_from_threads_and_processes_make_one_email_each(
    db_url: str, settings: Settings, cli_env: dict[str, str], tmp_path: Path
) -> None:
    events = _events(100)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    # Three processes (the CLI) and six threads deliver the same 100 events at the same time: the
    # threads start once every process has ingested its first line.
    # stderr goes to files: with two pipes, `communicate` reads the file descriptors directly and
    # would lose whatever the `readline` below had already buffered of stdout.
    errs = [tmp_path / f"ingest-{n}.err" for n in range(3)]
    processes = []
    for err in errs:
        with err.open("w") as err_file:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "worker.cli.main", "orders", "ingest", str(path)],
                    env=cli_env,
                    stdout=subprocess.PIPE,
                    stderr=err_file,
                    text=True,
                )
            )
    barrier = threading.Barrier(7)
    results: list[int] = []
    errors: list[BaseException] = []

    def deliver(offset: int) -> None:
        try:
            with psycopg.connect(db_url) as conn:
                barrier.wait()
                for i in range(len(events)):
                    e = events[(i + offset) % len(events)]
                    r = ingest_event(
                        conn, e["message_id"], e["consumer"], e["type"], e["payload"], settings=settings
                    )
                    results.append(r.email_id)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(k * 17,)) for k in range(6)]
    for t in threads:
        t.start()
    first_lines = []
    for p in processes:
        assert p.stdout is not None
        first_lines.append(p.stdout.readline())
    barrier.wait()
    for t in threads:
        t.join()
    outputs = []
    for first, p, err in zip(first_lines, processes, errs, strict=True):
        assert p.stdout is not None
        with p.stdout:
            out = first + p.stdout.read()  # the rest, from the buffer `readline` filled on
        p.wait(timeout=60)
        outputs.append((out, err.read_text()))
    assert not errors
    assert [p.returncode for p in processes] == [0, 0, 0], outputs
    cli_ids = {json.loads(line)["email_id"] for out, _ in outputs for line in out.splitlines()}
    with psycopg.connect(db_url) as conn:
        inbox = conn.execute("SELECT count(*), sum(receive_count) FROM mailroom.inbox").fetchone()
        emails = conn.execute(
            "SELECT recipient_email, count(*) FROM mailroom.email_queue GROUP BY 1"
        ).fetchall()
    assert inbox == (100, 100 * 9)
    assert len(emails) == 100 and all(n == 1 for _, n in emails)
    assert len(set(results)) == 100 and cli_ids == set(results)


def test_ingest_cli_prints_one_result_per_line(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from worker.cli.main import main

    good = {"message_id": "m-1", "type": "order_placed", "payload": placed()}
    lines = [
        json.dumps(good),
        "",
        json.dumps(good),
        "{oops",
        json.dumps({**good, "message_id": "m-2", "type": "refund"}),
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines)))
    code = main(["orders", "ingest", "-", "--consumer", "shop"])
    out, err = capsys.readouterr()
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    assert [r["line"] for r in results] == [1, 3, 4, 5]
    assert results[0]["duplicate"] is False and results[1] == {
        "line": 3,
        "email_id": results[0]["email_id"],
        "duplicate": True,
    }
    assert results[2]["field"] == "line" and results[3]["field"] == "type"
    assert "1 new, 1 duplicate, 2 rejected" in err
    row = conn.execute("SELECT consumer FROM mailroom.inbox").fetchone()
    assert row == {"consumer": "shop"} and counts(conn) == (1, 1)


async def test_ingested_order_email_is_delivered(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        ingest_event(conn, "m-1", "shop", "order_completed", placed(), settings=settings)
        ingest_event(conn, "m-1", "shop", "order_completed", placed(), settings=settings)
    assert await run_until_drained(db_url, settings) == 1
    [received] = smtp_sink.messages_to("ada@example.com")
    message = received.message
    assert message["Subject"] == "Your order A-1001 is complete"
    body = message.get_body(("plain",))
    assert body is not None and "Hello Ada Lovelace," in body.get_content()


def test_ingest_cli_rejects_a_line_that_is_not_utf8_and_goes_on(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.cli.main import main

    good = json.dumps({"message_id": "m-1", "type": "order_placed", "payload": placed()}).encode()
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"message_id": "\xff"}\n' + good + b"\n")
    assert main(["orders", "ingest", str(path)]) == 1
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert results[0] == {"line": 1, "error": "line: not valid UTF-8 (at column 17)", "field": "line"}
    assert results[1]["duplicate"] is False and counts(conn) == (1, 1)


def test_the_earlier_mailroom_ingest_still_ingests_says_its_new_name_and_is_not_listed(
    cli_env: dict[str, str], conn: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    from worker.cli.main import main

    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({"message_id": "m-1", "type": "order_placed", "payload": placed()}) + "\n")
    assert main(["ingest", str(path)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["duplicate"] is False and counts(conn) == (1, 1)
    assert "`mailroom ingest` is now `mailroom orders ingest`" in err
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"^\s+orders\s", listing, re.MULTILINE)
    assert not re.search(r"^\s+ingest\s", listing, re.MULTILINE)
