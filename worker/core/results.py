"""The result of an operator action on rows: what changed, and why the rest was left alone."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActionResult:
    """What an operator action changed, and why the rest was left alone."""

    changed: list[int]
    skipped: dict[int, str]

    def summary(self, verb: str, noun: str = "email(s)") -> str:
        """One line for the CLI and the console's notification."""
        text = f"{verb} {len(self.changed)} {noun}"
        if self.skipped:
            reasons = ", ".join(f"{i}: {why}" for i, why in sorted(self.skipped.items())[:10])
            more = "" if len(self.skipped) <= 10 else f" and {len(self.skipped) - 10} more"
            text += f"; left {len(self.skipped)} alone ({reasons}{more})"
        return text
