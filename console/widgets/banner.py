"""The banner under the header of every screen: why mail is not flowing or is at risk, and the key that helps.

Its reasons are `mailroom health`'s (`worker.ops.health.check_health`), read by the console on every live
update; this module only says them with the console's keys.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from console.context import context_of
from worker.ops.health import PROBLEM, Finding

# What to press for each kind of finding (the health text says what is wrong, this what to do here).
FIXES = {
    "no_sender": "3 Senders, u resumes one",
    "sender_unreachable": "3 Senders, p pauses it",
    "sender_suspended": "3 Senders, u resumes it",
    "no_worker": "start one: mailroom worker",
    "attempt_failures": "2 Failures shows why",
    "bounce_rate": "3 Senders, s suspends one",
    "complaint_rate": "3 Senders, s suspends one",
    "backlog": "7 Queue shows where",
    "oldest_pending": "7 Queue shows where",
    "idle": "is a worker running?",
}


def banner_text(findings: list[Finding]) -> Text:
    """One line per finding: a mark, what is wrong, and what to press (problems red, warnings yellow)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, finding in enumerate(findings):
        problem = finding.severity == PROBLEM
        if i:
            text.append("\n")
        text.append(" ✖ " if problem else " ▲ ", style="bold")
        text.append(f"→ {FIXES.get(finding.kind, finding.advice)}", style="bold reverse")
        text.append(f"  {finding.text}")
    return text


class Banner(Static):
    """Hidden while the health check finds nothing; one line per finding otherwise."""

    def __init__(self) -> None:
        super().__init__(id="banner")

    def on_mount(self) -> None:
        """Follow the console's latest health findings."""
        self.watch(self.app, "findings", self._redraw, init=True)

    def _redraw(self, _value: object = None) -> None:
        findings: list[Finding] = context_of(self).findings
        self.set_class(not findings, "hidden")
        self.set_class(any(f.severity == PROBLEM for f in findings), "-problem")
        self.update(banner_text(findings))
