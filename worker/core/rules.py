"""The content rules every writer of the queue obeys, from one specification (`content_rules.json`).

Python's validation reads them here; revisions 0006 and 0008 write the same file into the database's checks,
so a plain INSERT, an UPDATE, COPY, `mailroom.enqueue(...)` and the Python API refuse the same rows.
`mailroom.content_rules()` returns the specification the database enforces; a test holds the two equal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class ContentRules:
    """The specification, with its patterns compiled for Python."""

    spec: dict[str, Any]
    forbidden: re.Pattern[str]
    encoded_word: re.Pattern[str]
    header_name: re.Pattern[str]
    address: re.Pattern[str]
    address_long_label: re.Pattern[str]
    max_local_chars: int
    reserved_headers: frozenset[str]
    stored_by_mailroom: frozenset[str]
    relay_and_trace_headers: frozenset[str]
    relay_and_trace_header_prefixes: tuple[str, ...]
    max_address_chars: int
    max_header_value_chars: int
    max_name_chars: int
    max_subject_chars: int
    max_body_bytes: int
    max_recipients: int


def spec_text() -> str:
    """The specification file as shipped (what `mailroom.content_rules()` returns from the database)."""
    return resources.files("worker.core").joinpath("content_rules.json").read_text(encoding="utf-8")


@cache
def rules() -> ContentRules:
    """The shipped rules, loaded once."""
    spec: dict[str, Any] = json.loads(spec_text())
    return ContentRules(
        spec=spec,
        forbidden=re.compile(spec["forbidden_in_headers"]),
        encoded_word=re.compile(spec["encoded_word"]),
        header_name=re.compile(spec["header_name"]),
        address=re.compile(spec["address"]),
        address_long_label=re.compile(spec["address_long_label"]),
        max_local_chars=int(spec["max_local_chars"]),
        reserved_headers=frozenset(spec["reserved_headers"]),
        stored_by_mailroom=frozenset(spec["stored_by_mailroom"]),
        relay_and_trace_headers=frozenset(spec["relay_and_trace_headers"]),
        relay_and_trace_header_prefixes=tuple(spec["relay_and_trace_header_prefixes"]),
        max_address_chars=int(spec["max_address_chars"]),
        max_header_value_chars=int(spec["max_header_value_chars"]),
        max_name_chars=int(spec["max_name_chars"]),
        max_subject_chars=int(spec["max_subject_chars"]),
        max_body_bytes=int(spec["max_body_bytes"]),
        max_recipients=int(spec["max_recipients"]),
    )


def plain_address(address: str) -> bool:
    """Whether a normalised address passes the specification's address rule (as the database checks it)."""
    r = rules()
    return (
        len(address) <= r.max_address_chars
        and 0 < address.find("@") <= r.max_local_chars
        and r.address.fullmatch(address) is not None
        and r.address_long_label.search(address.rpartition("@")[2]) is None
    )


# The refusals, worded as the database words them (mailroom.headers_problem).
SET_BY_MAILROOM = "this header is set by Mailroom and cannot be overridden"
RELAY_OR_TRACE = (
    "a relay-control, trace or authentication header; relays and receiving servers trust it, so an"
    " application may not set it"
)


def reserved_header_problem(name: str) -> str | None:
    """Why an application may not set the header `name` (any case), or None when it may."""
    r = rules()
    lower = name.lower()
    if lower in r.reserved_headers:
        return SET_BY_MAILROOM
    if lower in r.relay_and_trace_headers or lower.startswith(r.relay_and_trace_header_prefixes):
        return RELAY_OR_TRACE
    return None
