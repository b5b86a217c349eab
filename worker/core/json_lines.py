"""One JSON line of `mailroom enqueue` into a request: decoded fast for the common line, exactly otherwise."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from worker.core.email_rows import EmailRequest, request_from_json
from worker.core.validation import ValidationError

# The longest line accepted: the largest body twice over (text and html) and room for the rest.
MAX_LINE_CHARS = 2 * 10 * 1024 * 1024 + 64 * 1024


class _DuplicateKey(ValueError):
    """A JSON object names one key twice: which value was meant is not for us to guess."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)
# The C scanner behind the decoder, called directly for the common line.
_SCAN_JSON: Callable[[str, int], tuple[object, int]] = cast(Any, _DECODER).scan_once
_JSON_SPACE = " \t\n\r"


def decode_line(text: str) -> object:
    """Decode one JSON line; anything but one well-formed JSON value is a `ValidationError` on field `line`:
    malformed JSON, a key given twice, nesting too deep to decode, a line too long, invalid UTF-8 (read
    with `surrogateescape`, its bad bytes arrive here as lone surrogates)."""
    if len(text) > MAX_LINE_CHARS:
        raise ValidationError("line", f"longer than {MAX_LINE_CHARS} characters")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationError("line", f"not valid UTF-8 (byte at column {exc.start + 1})") from None
    try:
        return _decode(text)
    except _DuplicateKey as exc:
        raise ValidationError("line", f"the key {exc.args[0]!r} is given twice") from None
    except RecursionError:
        raise ValidationError("line", "JSON nested too deeply") from None


def _decode(text: str) -> object:
    if text[:1] == "{":
        # An object followed by nothing but JSON white space is what json.loads would return;
        # anything else (or any error) goes through the full decoder for its exact result or message.
        try:
            obj, end = _SCAN_JSON(text, 0)
        except (StopIteration, ValueError) as exc:
            if isinstance(exc, _DuplicateKey):
                raise
        else:
            if not text[end:].strip(_JSON_SPACE):
                return obj
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ValidationError("line", f"malformed JSON: {exc.msg} at column {exc.colno}") from None


def parse_line(text: str) -> EmailRequest:
    """Decode one JSON line into a request; malformed JSON is a `ValidationError` on field `line`."""
    return request_from_json(decode_line(text))
