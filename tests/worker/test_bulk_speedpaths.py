"""Bulk enqueue's fast paths give exactly what the plain paths give: the same COPY text, rows and errors."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from worker.core import bulk
from worker.core.bulk import Results
from worker.core.config import Settings
from worker.core.copy_rows import insert_batch
from worker.core.outbox import (
    EmailRequest,
    prepare,
)


def _trigger_calls(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(calls), 0) AS n FROM pg_stat_xact_user_functions"
        " WHERE schemaname = 'mailroom' AND funcname = 'email_queue_before_insert'"
    ).fetchone()
    assert row is not None
    return int(row["n"])


def test_bulk_copy_of_email_without_a_time_takes_the_database_clock_without_the_insert_trigger(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    conn.execute("SET track_functions = 'pl'")
    later = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    rows = [
        prepare(
            EmailRequest(to=f"u{i}@example.com", subject="s", text="t", scheduled_for=when), None, settings
        )
        for i, when in enumerate([None, later, None])
    ]
    ids = insert_batch(conn, rows)
    assert _trigger_calls(conn) == 0
    stored = conn.execute(
        "SELECT scheduled_for = created_at AS now, scheduled_for FROM mailroom.email_queue WHERE id = ANY(%s) ORDER BY id",
        (ids,),
    ).fetchall()
    assert [(r["now"], r["scheduled_for"] if not r["now"] else None) for r in stored] == [
        (True, None),
        (False, later),
        (True, None),
    ]


def test_bulk_copy_of_keyed_email_without_a_time_is_still_filled_by_the_trigger(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    row = prepare(
        EmailRequest(to="a@example.com", subject="s", text="t", idempotency_key="k"), None, settings
    )
    [email_id] = insert_batch(conn, [row])
    stored = conn.execute(
        "SELECT scheduled_for = created_at AS now FROM mailroom.email_queue WHERE id = %s", (email_id,)
    ).fetchone()
    assert stored == {"now": True}


def test_explicit_null_scheduled_for_is_filled_from_the_database_clock(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET track_functions = 'pl'")
    stored = conn.execute(
        "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, scheduled_for)"
        " VALUES ('a@example.com', 's', 't', NULL) RETURNING scheduled_for = now() AS now"
    ).fetchone()
    assert stored == {"now": True}
    assert _trigger_calls(conn) == 1


@pytest.mark.parametrize("scheduled_for", [None, "2030-01-02T03:04:05Z"])
def test_insert_of_an_email_that_is_not_pending_is_still_refused(
    conn: psycopg.Connection[Any], scheduled_for: str | None
) -> None:
    with pytest.raises(
        psycopg.errors.CheckViolation, match=r"a new email starts pending \(or unrendered\), not sent"
    ):
        conn.execute(
            "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, scheduled_for, status,"
            " sent_at, finished_at) VALUES ('a@example.com', 's', 't', %s, 'sent', now(), now())",
            (scheduled_for,),
        )


def _line(i: int, subject: str | None = None, key: str | None = None) -> tuple[int, str]:
    obj: dict[str, Any] = {"to": f"u{i}@example.com", "subject": subject or f"s{i}", "text": "b"}
    if key is not None:
        obj["idempotency_key"] = key
    return i, json.dumps(obj)


def test_parallel_writers_keep_ids_keys_and_results_in_input_order(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    lines = [_line(i, key=f"k{i % 7}" if i % 3 == 0 else None) for i in range(1, 121)]
    emitted: list[Results] = []
    counts = bulk.enqueue_lines(settings.database_url, lines, settings, emitted.append, batch_size=10, jobs=2)
    assert len(emitted) == 12
    results = [json.loads(text) for batch in emitted for _, text in batch]
    assert [r["line"] for r in results] == list(range(1, 121))
    assert (counts.accepted, counts.rejected) == (120, 0)
    # A repeated key resolves to the email of its first line, even when that line was in another batch.
    first_of_key: dict[str, int] = {}
    fresh: list[int] = []
    for (i, _), result in zip(lines, results, strict=True):
        key = f"k{i % 7}" if i % 3 == 0 else None
        if key is not None and key in first_of_key:
            assert result["id"] == first_of_key[key]
            continue
        if key is not None:
            first_of_key[key] = result["id"]
        fresh.append(result["id"])
    assert fresh == sorted(fresh)  # ids ascend with the input
    stored = conn.execute("SELECT id, subject FROM mailroom.email_queue ORDER BY id").fetchall()
    assert [r["id"] for r in stored] == fresh
    firsts = [i for i, _ in lines if i % 3 or f"k{i % 7}" not in {f"k{j % 7}" for j in range(3, i, 3)}]
    assert [r["subject"] for r in stored] == [f"s{i}" for i in firsts]


def test_after_a_failed_batch_later_batches_roll_back_and_earlier_ones_stay(
    conn: psycopg.Connection[Any], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = bulk.insert_copy_rows
    later_batch_copied = threading.Event()

    def insert(db: psycopg.Connection[Any], rows: Any, **hooks: Any) -> list[int]:
        if rows and "boom" in rows[0][1]:
            turn = hooks["before_keys"]

            def fail() -> None:
                turn()
                assert later_batch_copied.wait(30)  # the next batch has copied its rows, uncommitted
                raise RuntimeError("boom")

            hooks["before_keys"] = fail
        elif rows and "after" in rows[0][1]:
            waits = hooks["before_keys"]

            def copied() -> None:
                later_batch_copied.set()
                waits()

            hooks["before_keys"] = copied
        return real(db, rows, **hooks)

    monkeypatch.setattr(bulk, "insert_copy_rows", insert)
    lines = [_line(i, "boom" if 51 <= i <= 60 else "after" if i > 60 else None) for i in range(1, 101)]
    emitted: list[Results] = []
    with pytest.raises(RuntimeError, match="boom"):
        bulk.enqueue_lines(settings.database_url, lines, settings, emitted.append, batch_size=10, jobs=2)
    assert [json.loads(text)["line"] for batch in emitted for _, text in batch] == list(range(1, 51))
    stored = conn.execute("SELECT subject FROM mailroom.email_queue ORDER BY id").fetchall()
    assert [r["subject"] for r in stored] == [f"s{i}" for i in range(1, 51)]
