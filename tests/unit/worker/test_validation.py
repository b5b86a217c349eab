"""Address checks: the fast path never disagrees with email-validator."""

from __future__ import annotations

import os

import pytest
from email_validator import EmailNotValidError, validate_email
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.validation import ValidationError, _fast_address, normalise_address

LOCAL = st.text(alphabet="abcXYZ019.!#$%&'*+/=?^_`{|}~-", min_size=1, max_size=70)
DOMAIN = st.lists(st.text(alphabet="abz09-", min_size=1, max_size=64), min_size=1, max_size=4).map(".".join)
TLD = st.sampled_from(["com", "org", "io", "test", "localhost", "x", "c0m", "onion", "arpa", "museum"])


def _reference(address: str) -> str | None:
    try:
        valid = validate_email(address, check_deliverability=False, allow_smtputf8=False)
    except EmailNotValidError:
        return None
    return str(valid.ascii_email or valid.normalized)


@settings(max_examples=2000, deadline=None, derandomize=bool(os.environ.get("CI")))
@given(local=LOCAL, domain=DOMAIN, tld=TLD)
def test_fast_path_accepts_only_what_email_validator_accepts_unchanged(
    local: str, domain: str, tld: str
) -> None:
    address = f"{local}@{domain}.{tld}"
    fast = _fast_address(address)
    if fast is not None:
        assert _reference(address) == fast


@pytest.mark.parametrize(
    ("given_", "expected"),
    [("Alice@Example.COM", "Alice@example.com"), ("bob@bücher.example", "bob@xn--bcher-kva.example")],
)
def test_addresses_are_normalised(given_: str, expected: str) -> None:
    assert normalise_address("to", given_) == expected


@pytest.mark.parametrize(
    "bad",
    ["plain", "a@b", "a@localhost", "a@x.test", "a..b@example.com", ".a@example.com", "ü@example.com", ""],
)
def test_bad_addresses_are_rejected(bad: str) -> None:
    with pytest.raises(ValidationError):
        normalise_address("to", bad)


@pytest.mark.parametrize("name", ["X-Foo\n", "X-Campaign\n"])
def test_a_header_name_with_a_final_newline_is_refused_by_the_python_check(name: str) -> None:
    # A pattern ending in $ also matches before a final newline; the database refused such a name with a
    # CheckViolation, so the caller got a database error instead of this ValidationError.
    from worker.core.validation import check_header_name

    with pytest.raises(ValidationError, match="not a valid header name"):
        check_header_name(name)


def test_an_address_with_a_final_newline_is_not_a_plain_address() -> None:
    from worker.core.rules import plain_address

    assert plain_address("ada@example.com")
    assert not plain_address("ada@example.com\n")
    assert _fast_address("ada@example.com\n") is None
