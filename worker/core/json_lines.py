"""One JSON line of `mailroom enqueue` into a request: decoded fast for the common line, exactly otherwise."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from worker.core.outbox import EmailRequest, request_from_json
from worker.core.validation import ValidationError

# The C scanner behind json.loads (a default decoder's), called directly for the common line.
_SCAN_JSON: Callable[[str, int], tuple[object, int]] = cast(Any, json.JSONDecoder()).scan_once
_JSON_SPACE = " \t\n\r"


def decode_line(text: str) -> object:
    """Decode one JSON line; malformed JSON is a `ValidationError` on field `line`."""
    if text[:1] == "{":
        # An object followed by nothing but JSON white space is what json.loads would return;
        # anything else (or any error) goes through json.loads for its exact result or message.
        try:
            obj, end = _SCAN_JSON(text, 0)
        except (StopIteration, ValueError):
            pass
        else:
            if not text[end:].strip(_JSON_SPACE):
                return obj
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError("line", f"malformed JSON: {exc.msg} at column {exc.colno}") from None


def parse_line(text: str) -> EmailRequest:
    """Decode one JSON line into a request; malformed JSON is a `ValidationError` on field `line`."""
    return request_from_json(decode_line(text))
