"""Bulk enqueue's fast paths give exactly what the plain paths give: the same COPY text, rows and errors."""

from __future__ import annotations

import enum
import json
import os
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from worker.core import bulk
from worker.core.bulk import Results
from worker.core.config import Settings
from worker.core.copy_rows import copy_row, insert_batch
from worker.core.json_lines import decode_line
from worker.core.outbox import (
    COLUMNS,
    LINKS,
    EmailRequest,
    prepare,
    prepare_json,
    request_from_json,
)
from worker.core.templates import TemplateCatalog, builtin_templates
from worker.core.validation import ValidationError

CI = bool(os.environ.get("CI"))
_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def _reference_value(value: Any) -> str:
    # The per-value formatter `copy_row` had before its whole-row path (kept here as the oracle).
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, str):
        return value.translate(_ESCAPES)
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


class _Text(str):
    """A str subclass whose own `__str__` differs: formatting must use the characters, not `str()`."""

    def __str__(self) -> str:
        return "not\tthis"


class _Level(enum.IntEnum):
    HIGH = 7


# Characters that COPY escapes, and ordinary text.
_ESCAPED = st.lists(st.sampled_from(["\\", "\t", "\n", "\r", "N", "a", "é", " ", "\\N"])).map("".join)
_PLAIN = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    _ESCAPED,
    st.text(),
    st.uuids(),
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5, minutes=-30))])),
)
# Values the whole-row path must hand to the per-value path: text holding its stand-ins (NUL, \x01),
# a str subclass, an int subclass.
_ODD = st.one_of(
    st.tuples(_ESCAPED, st.sampled_from(["\x00", "\x01"]), _ESCAPED).map("".join),
    _ESCAPED.map(_Text),
    st.just(_Level.HIGH),
)


@hyp_settings(max_examples=400, deadline=None, derandomize=CI)
@given(
    values=st.lists(_PLAIN, min_size=LINKS, max_size=LINKS),
    odd=st.none() | st.tuples(st.integers(0, LINKS - 1), _ODD),
)
def test_copy_row_formats_exactly_like_the_per_value_formatter(
    values: list[Any], odd: tuple[int, Any] | None
) -> None:
    if odd is not None:
        values[odd[0]] = odd[1]
    links = ((uuid.uuid4(), "https://example.com/"),)
    key, text, got_links, scheduled = copy_row((*values, links))
    # scheduled_for goes last, and only when the email has one (COPY_COLUMNS leave it out).
    at = COLUMNS.index("scheduled_for")
    ordered = values[:at] + values[at + 1 :] + ([] if values[at] is None else [values[at]])
    assert text == "\t".join(_reference_value(v) for v in ordered)
    assert scheduled is (values[at] is not None)
    assert key is values[COLUMNS.index("idempotency_key")]
    assert got_links is links


def test_copy_row_keeps_null_distinct_from_a_literal_backslash_n() -> None:
    values: list[Any] = ["\\N", None, "\x01", "\x00", *[None] * (LINKS - 4)]
    _, text, _, _ = copy_row((*values, ()))
    assert text.split("\t")[:4] == ["\\\\N", "\\N", "\x01", "\x00"]


_SETTINGS = Settings(database_url="postgresql://unused")
_CATALOG = TemplateCatalog(builtin_templates())
# Columns holding fresh random tokens: equal in kind, not in value, between two calls.
_TOKENS = {COLUMNS.index("tracking_token"), COLUMNS.index("unsubscribe_token")}
_HEADERS = COLUMNS.index("headers")
# ... and in the open pixel, tracked links and unsubscribe headers that carry them.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2000, 2000) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=6), inner, max_size=2),
    max_leaves=4,
)
_FIELD_VALUES = {
    "to": st.sampled_from(["a@example.com", "Bob@Example.COM", " x@y.org ", "nope", "a@b", ""]) | _ANY_JSON,
    "to_name": st.sampled_from(["Ann", "A\nB", "=?utf-8?q?x?=", ""]) | _ANY_JSON,
    "subject": st.sampled_from(["Hi", "  padded  ", "", "bad\r\nBcc: x"]) | _ANY_JSON,
    "text": st.sampled_from(["body", " ", "nul\x00", "tab\there\\"]) | _ANY_JSON,
    "html": st.sampled_from(["<p>hi</p>", '<a href="https://example.com/x">x</a>', ""]) | _ANY_JSON,
    "template": st.sampled_from(["activation", "no-such-template"]) | _ANY_JSON,
    "locale": st.sampled_from(["en", "fr-CA", "xx"]) | _ANY_JSON,
    "data": st.just({"login": "bob", "code": "1", "expires_at": "soon", "link": "https://e.x/a"}) | _ANY_JSON,
    "priority": st.sampled_from([0, 5, -1000, 1001]) | _ANY_JSON,
    "scheduled_for": st.sampled_from(["2030-01-02T03:04:05Z", "2030-01-02T03:04:05", "soon"]) | _ANY_JSON,
    "idempotency_key": st.sampled_from(["k1", "", "x" * 256]) | _ANY_JSON,
    "campaign_id": st.sampled_from(["spring", "", "c" * 101]) | _ANY_JSON,
    "headers": st.sampled_from([{}, {"X-Tag": "a"}, {"Subject": "x"}, {"X-A": "b\nc"}]) | _ANY_JSON,
    "max_retries": st.sampled_from([0, 3, 101]) | _ANY_JSON,
    "transactional": st.booleans() | _ANY_JSON,
    "reference_type": st.sampled_from(["order", "a\tb"]) | _ANY_JSON,
    "reference_id": st.sampled_from(["1", "\\"]) | _ANY_JSON,
    "track": st.booleans() | _ANY_JSON,
    "bogus": _ANY_JSON,
}
_LINE = (
    st.fixed_dictionaries(
        {"to": _FIELD_VALUES["to"], "subject": _FIELD_VALUES["subject"], "text": _FIELD_VALUES["text"]},
        optional={k: v for k, v in _FIELD_VALUES.items() if k not in ("to", "subject", "text")},
    )
    | _ANY_JSON
)


def _outcome(build: Any) -> Any:
    try:
        row = build()
    except ValidationError as exc:
        return ("rejected", exc.field, str(exc))
    masked = [
        ("token" if v is not None else None)
        if i in _TOKENS
        else _UUID.sub("U", v)
        if isinstance(v, str)
        else v
        for i, v in enumerate(row[:LINKS])
    ]
    return ("stored", masked, [url for _, url in row[LINKS]])


@hyp_settings(max_examples=400, deadline=None, derandomize=CI)
@given(obj=_LINE)
def test_prepare_json_accepts_and_rejects_exactly_like_prepare_of_the_request(obj: Any) -> None:
    slow = _outcome(lambda: prepare(request_from_json(obj), _CATALOG, _SETTINGS, "cli"))
    fast = _outcome(lambda: prepare_json(obj, _CATALOG, _SETTINGS, "cli"))
    assert fast == slow


def test_prepare_json_stores_the_tokens_it_puts_in_the_headers() -> None:
    row = prepare_json(
        {"to": "a@example.com", "subject": "s", "text": "t", "campaign_id": "c", "transactional": False},
        _CATALOG,
        _SETTINGS,
    )
    token = row[COLUMNS.index("unsubscribe_token")]
    assert isinstance(token, uuid.UUID)
    assert str(token) in row[_HEADERS]


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


def _loads_outcome(text: str) -> Any:
    try:
        return ("ok", json.loads(text))
    except json.JSONDecodeError as exc:
        return ("error", f"malformed JSON: {exc.msg} at column {exc.colno}")


def _decode_outcome(text: str) -> Any:
    try:
        return ("ok", decode_line(text))
    except ValidationError as exc:
        return ("error", exc.message)


_JSONISH = st.lists(
    st.sampled_from(
        ["{", "}", '"a"', ":", "1", ",", "[", "]", " ", "\n", "\r", "\t", "\x0b", "\u2028", "x", "\\"]
    )
).map("".join)


@hyp_settings(max_examples=500, deadline=None, derandomize=CI)
@given(
    text=st.one_of(
        _JSONISH,
        st.builds(lambda obj, tail: json.dumps(obj) + tail, _ANY_JSON, _JSONISH),
        st.text(),
    )
)
def test_decode_line_gives_what_json_loads_gives(text: str) -> None:
    assert _decode_outcome(text) == _loads_outcome(text)
