"""Producers, tracking and compliance: what the lifecycle, scheduling, inbox, signature and tracking
producers add to the data model of revision 0001.

The revision is written as one SQL file per area in `0002/` (`NN_area.sql`, run in name order) and
its undo (`NN_area.down.sql`, run in reverse order).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0002")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
