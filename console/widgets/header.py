"""The console's header: database, connection state, last update, read-only, and the screen tabs."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.widgets import Static

from console.context import SCREENS, ConsoleContext, context_of
from worker.ops.health import PROBLEM

STATE_STYLES = {"live": "bold green", "reconnecting": "bold yellow", "connecting": "yellow"}


class ConsoleHeader(Static):
    """Two lines: what the console is connected to and how fresh it is; then the screens by number."""

    def __init__(self, mode: str) -> None:
        super().__init__(id="header")
        self.mode = mode

    @property
    def console(self) -> ConsoleContext:
        """The running console, by its interface."""
        return context_of(self)

    def on_mount(self) -> None:
        """Follow the app's connection state and update time."""
        self.watch(self.app, "live_state", self._redraw, init=False)
        self.watch(self.app, "updated_at", self._redraw, init=False)
        self.watch(self.app, "findings", self._redraw, init=False)
        self._redraw()

    def _redraw(self, _value: object = None) -> None:
        self.update(self.render_header(self.console.live_state, self.console.updated_at))

    def render_header(self, state: str, updated: datetime | None) -> Text:
        """The header's text for a connection state and last update time."""
        text = Text()
        text.append(" Mailroom ", style="bold reverse")
        text.append("  db ", style="dim")
        text.append(self.console.label, style="bold")
        text.append("   ● ", style=STATE_STYLES.get(state, "yellow"))
        text.append(state, style=STATE_STYLES.get(state, "yellow"))
        text.append("  updated ", style="dim")
        text.append(updated.strftime("%H:%M:%S UTC") if updated else "never")
        if self.console.read_only:
            text.append("  READ-ONLY", style="bold magenta")
        if findings := self.console.findings:
            # The banner cuts each finding to one line: ! shows them in full.
            problems = sum(1 for f in findings if f.severity == PROBLEM)
            mark = f"✖ {problems}" if problems else f"▲ {len(findings)}"
            text.append(f"  {mark} (! details)", style="bold red" if problems else "bold yellow")
        text.append("\n")
        for mode, key, title in SCREENS:
            text.append(" ")
            text.append(f"{key} {title}", style="bold reverse" if mode == self.mode else "")
        return text
