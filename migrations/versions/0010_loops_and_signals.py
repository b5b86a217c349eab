"""The loops the references left open and the signals a monitoring stack reads: Gmail API senders,
suppressions people manage, birthday outcomes, per-sender batches, campaign headers and postal
addresses, DNS findings, DMARC reports and trace context. Written as SQL parts in `0010/`.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0010")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
