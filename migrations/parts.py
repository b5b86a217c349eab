"""Revisions written as SQL parts: one file per area in `versions/NNNN/` (`NN_area.sql`, run in name
order on upgrade) with its undo (`NN_area.down.sql`, run in reverse order on downgrade)."""

from __future__ import annotations

from pathlib import Path

from alembic import op


def _run(path: Path) -> None:
    # Through the driver directly: a part is many statements and may use % in format strings.
    raw = op.get_bind().connection.driver_connection
    raw.execute(path.read_text(encoding="utf-8"))


def _parts(directory: Path, pattern: str) -> list[Path]:
    found = sorted(directory.glob(pattern))
    if not found:
        # An installation that left the SQL out must fail here, not migrate to an empty revision.
        raise RuntimeError(f"no SQL parts ({pattern}) in {directory}")
    return found


def upgrade(directory: Path) -> None:
    """Apply every area's part in name order."""
    for path in _parts(directory, "*.sql"):
        if not path.name.endswith(".down.sql"):
            _run(path)


def downgrade(directory: Path) -> None:
    """Undo every area's part in reverse name order."""
    for path in reversed(_parts(directory, "*.down.sql")):
        _run(path)
