"""A schema that explains itself: constraints named for what they check, a comment on every table,
function and trigger (and every column whose meaning its name does not tell), and the engine's own
changes. Written as SQL parts in `0009/`.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0009")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
