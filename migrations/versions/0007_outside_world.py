"""The outside world answers: who a bounce or complaint counts against (sender, campaign), a bounce
domain and a relay's event tags per sender, complaint digests for the administrators, OAuth2 senders.
Written as SQL parts in `0007/`.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

from pathlib import Path

from migrations import parts

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

PARTS = Path(__file__).with_name("0007")


def upgrade() -> None:
    """Apply every area's part in name order."""
    parts.upgrade(PARTS)


def downgrade() -> None:
    """Undo every area's part in reverse name order."""
    parts.downgrade(PARTS)
