"""The test sink's pure parts: refusal shares and address masking."""

from __future__ import annotations

import pytest

from worker.core.masking import mask_address, mask_addresses
from worker.devtools.sink import RefuseShare


def test_refuse_share_is_deterministic_and_close_to_the_requested_shares() -> None:
    share = RefuseShare(temporary=0.2, permanent=0.1)
    addresses = [f"user{i}@example.com" for i in range(2000)]

    first = [share.reply_for(a) for a in addresses]
    second = [RefuseShare(temporary=0.2, permanent=0.1).reply_for(a) for a in addresses]

    assert first == second
    temporary = sum(1 for r in first if r is not None and r.code == 450)
    permanent = sum(1 for r in first if r is not None and r.code == 550)
    assert 300 < temporary < 500
    assert 130 < permanent < 270
    assert share.reply_for("USER1@Example.com") == share.reply_for("user1@example.com")


def test_refuse_share_rejects_shares_above_one() -> None:
    with pytest.raises(ValueError, match="must not exceed 1"):
        RefuseShare(temporary=0.6, permanent=0.5)


@pytest.mark.parametrize(
    ("address", "masked"),
    [
        ("alice@example.com", "ali***@example.com"),
        ("bob@example.com", "bo***@example.com"),
        ("al@example.com", "a***@example.com"),
        ("x@example.com", "***@example.com"),
        ("@example.com", "***@example.com"),
        ("not-an-address", "not***"),
        ("", "***"),
    ],
)
def test_mask_address_keeps_at_most_three_characters_and_never_a_whole_local_part(
    address: str, masked: str
) -> None:
    assert mask_address(address) == masked


def test_mask_addresses_joins_masked_addresses() -> None:
    assert mask_addresses(["alice@example.com", "bob@example.org"]) == "ali***@example.com, bo***@example.org"
