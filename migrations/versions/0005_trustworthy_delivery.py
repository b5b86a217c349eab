"""Trustworthy delivery: claims with their quota, sender circuits, per-sender timeouts, worker heartbeats.

A claim (`mailroom.claims`) is one batch under one lease token for one sender, with the quota
reserved for it: whoever ends the claim -- its worker, or another worker rescuing its expired
lease -- gives back the unused quota in the transaction that returns the emails
(`mailroom.rescue_expired_claims`). A sender's circuit opens when its relay fails and is probed
again after a capped backoff. An email may leave `pending` as `failed` when it outlived the queue
lifetime. Written as SQL parts in `0005/`.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0005")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
