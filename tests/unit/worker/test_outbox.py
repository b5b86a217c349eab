"""Outbox JSON lines, read without a database: malformed lines are refused naming the field; message ids are stable."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from worker.core.config import Settings
from worker.core.json_lines import decode_line, parse_line
from worker.core.message import build_message
from worker.core.outbox import COLUMNS, EmailRequest, prepare, prepare_json
from worker.core.validation import ValidationError


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("{not json", "line"),
        ("[1, 2]", "line"),
        ('{"to": "a@example.com", "subject": "s", "text": "b", "bcc": 5}', "bcc"),
        ('{"to": "a@example.com", "subject": "s", "text": "b", "sender": "x@y.z"}', "sender"),
        (
            '{"to": "a@example.com", "subject": "s", "text": "b", "scheduled_for": "tomorrow"}',
            "scheduled_for",
        ),
        (
            '{"to": "a@example.com", "subject": "s", "text": "b", "scheduled_for": "2026-11-21T09:00:00"}',
            "scheduled_for",
        ),
        ('{"to": "a@example.com", "subject": 5, "text": "b"}', "subject"),
        ('{"to": "a@example.com", "subject": "s", "text": "b", "headers": {"X": 1}}', "headers"),
    ],
)
def test_malformed_json_lines_are_rejected_naming_the_field(line: str, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_line(line)
    assert caught.value.field == field


def test_message_id_is_stable_for_one_email() -> None:
    row = {
        "id": 42,
        "created_at": datetime(2026, 11, 21, tzinfo=UTC),
        "recipient_email": "a@example.com",
        "recipient_name": None,
        "subject": "s",
        "text_body": "b",
        "html_body": None,
        "headers": {},
    }
    first = build_message(row, "noreply@example.org")
    second = build_message(row, "noreply@example.org")
    assert first.message_id == second.message_id == "<42.660be0ab5c000@example.org>"


def test_headers_none_means_no_headers_from_python_as_from_a_json_line() -> None:
    fields = {"to": "ada@example.com", "subject": "Hello", "text": "Hi"}
    line = json.dumps({**fields, "headers": None})
    settings = Settings()
    without = prepare(EmailRequest(**fields), None, settings)
    assert without[COLUMNS.index("headers")] == "{}"
    # Python's door, and the command line's two (one line through a request, the bulk path without one).
    assert prepare(EmailRequest(**fields, headers=None), None, settings) == without
    assert prepare(parse_line(line), None, settings) == without
    assert prepare_json(decode_line(line), None, settings) == without
