"""What one maintenance run did: rows per step, and per final state what retention archived and deleted."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class StepReport:
    """One maintenance step: how many rows it touched (or would touch, in a dry run) and what it did."""

    name: str
    rows: int = 0
    details: list[str] = field(default_factory=list)


@dataclass
class StateCounts:
    """Retention of one final state in one run: its age, the cutoff, and rows found, archived, deleted."""

    age_days: int
    cutoff: str
    due: int = 0  # rows older than the cutoff when the run looked
    archived: int = 0  # new records written to the archive files
    deleted: int = 0  # rows deleted from the queue (a dry run deletes none)


@dataclass
class MaintenanceReport:
    """Everything one run did; `errors` lists what it could not do (the rest still ran)."""

    dry_run: bool
    steps: list[StepReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None
    # final state (sent, failed, expired, cancelled, suppressed) -> what retention did with it
    retention: dict[str, StateCounts] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Rows touched by every step."""
        return sum(step.rows for step in self.steps)

    def retention_summary(self) -> dict[str, dict[str, int]]:
        """Per final state: rows due, records archived, rows deleted (for a log line's fields)."""
        return {
            name: {"due": c.due, "archived": c.archived, "deleted": c.deleted}
            for name, c in self.retention.items()
        }

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly form for `--json` output."""
        return {
            "dry_run": self.dry_run,
            "skipped": self.skipped,
            "steps": [{"name": s.name, "rows": s.rows, "details": s.details} for s in self.steps],
            "retention": {name: asdict(c) for name, c in self.retention.items()},
            "errors": self.errors,
        }
