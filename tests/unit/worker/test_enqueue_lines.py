"""A bad enqueue line is a validation error naming why, found before any database work."""

from __future__ import annotations

import pytest

from worker.core.json_lines import decode_line
from worker.core.validation import ValidationError


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"to": "a@example.com", "to": "b@example.com"}', "the key 'to' is given twice"),
        ('{"to": "a@example.com", "data": {"x": 1, "x": 2}}', "the key 'x' is given twice"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"to": "a@example.com", "subject": "caf\udce9"}', "not valid UTF-8"),
        ('{"to": ', "malformed JSON"),
    ],
)
def test_a_bad_line_is_a_validation_error_naming_why(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        decode_line(text)
