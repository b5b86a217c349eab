"""VERP return paths: authentic tokens come back as (email id, recipient hash); forged or altered ones do not."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.config import Settings
from worker.core.crypto import generate_key
from worker.core.return_path import (
    MAX_LOCAL_PART,
    derive_key,
    envelope_sender,
    looks_like_return_path,
    parse_return_path,
    recipient_hash,
    return_path,
)

# CI runs the same examples every time; local runs explore.
CI = bool(os.environ.get("CI"))
KEY = derive_key(generate_key())


def test_a_return_path_names_its_email_and_recipient_on_the_bounce_domain() -> None:
    address = return_path(4217, "Ada@Example.com", "Bounces.Example.org", "bounces", KEY)
    local, _, domain = address.partition("@")
    assert domain == "bounces.example.org"
    assert local.startswith("bounces+") and local == local.lower()
    assert "ada" not in local
    assert parse_return_path(address, KEY) == (4217, recipient_hash("ada@example.com", KEY))


def test_the_largest_email_id_stays_within_the_local_part_limit() -> None:
    address = return_path(2**63 - 1, "a@example.com", "b.example", "bounces", KEY)
    assert len(address.partition("@")[0]) <= MAX_LOCAL_PART
    assert parse_return_path(address, KEY) is not None


def test_a_prefix_that_makes_the_local_part_too_long_is_refused() -> None:
    with pytest.raises(ValueError, match="longer than 64"):
        return_path(2**63 - 1, "a@example.com", "b.example", "b" * 31, KEY)


def test_a_relay_changing_the_case_or_adding_brackets_does_not_break_the_token() -> None:
    address = return_path(9, "a@example.com", "b.example", "bounces", KEY)
    assert parse_return_path(f"<{address.upper()}>", KEY) == parse_return_path(address, KEY)


def test_a_token_made_with_another_key_is_refused() -> None:
    other = return_path(9, "a@example.com", "b.example", "bounces", derive_key(generate_key()))
    assert parse_return_path(other, KEY) is None
    assert looks_like_return_path(other)


@settings(deadline=None, derandomize=CI)
@given(st.integers(min_value=0, max_value=10**12), st.data())
def test_every_altered_character_of_a_token_is_refused(email_id: int, data: st.DataObject) -> None:
    address = return_path(email_id, "a@example.com", "b.example", "bounces", KEY)
    token_start = address.index("+") + 1
    position = data.draw(st.integers(min_value=token_start, max_value=address.index("@") - 1))
    replacement = data.draw(st.sampled_from("0123456789abcdefghijklmnopqrstuvwxyz-"))
    altered = address[:position] + replacement + address[position + 1 :]
    if altered != address:
        assert parse_return_path(altered, KEY) is None


@settings(deadline=None, derandomize=CI)
@given(st.text(max_size=120))
def test_arbitrary_text_is_never_taken_for_a_return_path(text: str) -> None:
    assert parse_return_path(text, KEY) is None


def test_without_a_bounce_domain_the_envelope_sender_is_the_from_address() -> None:
    assert (
        envelope_sender(Settings(secret_key=generate_key()), 1, "a@x.example", "me@y.example")
        == "me@y.example"
    )


def test_with_a_bounce_domain_the_envelope_sender_is_an_authentic_return_path() -> None:
    secret = generate_key()
    sender = envelope_sender(
        Settings(secret_key=secret, bounce_domain="b.example"), 77, "a@x.example", "me@y"
    )
    assert sender.endswith("@b.example")
    assert parse_return_path(sender, derive_key(secret)) == (
        77,
        recipient_hash("a@x.example", derive_key(secret)),
    )


def test_the_bounce_domain_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAILROOM_BOUNCE_DOMAIN", " Bounces.Example.ORG ")
    assert Settings.from_env().bounce_domain == "bounces.example.org"
