"""Hypothesis strategies for enqueue JSON lines: field values, headers, escapes and odd shapes."""

from __future__ import annotations

import enum
import os
import re
from datetime import UTC, timedelta, timezone

from hypothesis import strategies as st

from worker.core.config import Settings
from worker.core.outbox import (
    COLUMNS,
)
from worker.core.templates import TemplateCatalog, builtin_templates

CI = bool(os.environ.get("CI"))


_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


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


_JSONISH = st.lists(
    st.sampled_from(
        ["{", "}", '"a"', ":", "1", ",", "[", "]", " ", "\n", "\r", "\t", "\x0b", "\u2028", "x", "\\"]
    )
).map("".join)
