"""The bulk enqueue shortcuts give exactly what the general path gives: COPY rows, prepared JSON, decoded lines."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from tests.worker.json_strategies import (
    _ANY_JSON,
    _CATALOG,
    _ESCAPES,
    _HEADERS,
    _JSONISH,
    _LINE,
    _ODD,
    _PLAIN,
    _SETTINGS,
    _TOKENS,
    _UUID,
    CI,
)
from worker.core.copy_rows import copy_row
from worker.core.json_lines import decode_line
from worker.core.outbox import (
    COLUMNS,
    LINKS,
    prepare,
    prepare_json,
    request_from_json,
)
from worker.core.validation import ValidationError


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
    values[COLUMNS.index("from_email")] = None  # a From of its own goes through the door, not COPY
    links = ((uuid.uuid4(), "https://example.com/"),)
    key, text, got_links, scheduled = copy_row((*values, links, None, ()))
    # scheduled_for goes last, and only when the email has one (COPY_COLUMNS leave it out).
    at = COLUMNS.index("scheduled_for")
    ordered = values[:at] + values[at + 1 :] + ([] if values[at] is None else [values[at]])
    assert text == "\t".join(_reference_value(v) for v in ordered)
    assert scheduled is (values[at] is not None)
    assert key is values[COLUMNS.index("idempotency_key")]
    assert got_links is links


def test_copy_row_keeps_null_distinct_from_a_literal_backslash_n() -> None:
    values: list[Any] = ["\\N", None, "\x01", "\x00", *[None] * (LINKS - 4)]
    _, text, _, _ = copy_row((*values, (), None, ()))
    assert text.split("\t")[:4] == ["\\\\N", "\\N", "\x01", "\x00"]


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
        replace(_SETTINGS, postal_address="Shop Ltd, 1 Market Street, Bristol"),  # campaign email needs one
    )
    token = row[COLUMNS.index("unsubscribe_token")]
    assert isinstance(token, uuid.UUID)
    assert str(token) in row[_HEADERS]


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
