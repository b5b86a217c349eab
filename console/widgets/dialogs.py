"""Modal dialogs: a yes/no confirmation (styled destructive when it is) and the key help."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.markup import escape
from rich.table import Table
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Static

from worker.ops.health import PROBLEM, Finding


class ConfirmScreen(ModalScreen[bool]):
    """Ask before an action that changes many rows or takes something out of service."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", show=False),
        Binding("n,escape", "answer(False)", "Keep as is", show=False),
    ]

    def __init__(self, question: str, *, confirm: str = "Yes", destructive: bool = False) -> None:
        super().__init__(classes="destructive" if destructive else "")
        self.question = question
        self.confirm_label = confirm
        self.destructive = destructive

    def compose(self) -> ComposeResult:
        """The question, two buttons that say what each does, and the keys that press them."""
        with Vertical(id="dialog"):
            yield Static(self.question, id="question")
            with Horizontal(id="buttons"):
                yield Button(self.confirm_label, variant="error" if self.destructive else "primary", id="yes")
                yield Button("Keep as is", id="no")
            yield Static(f"y: {self.confirm_label.lower()}   n or escape: keep as is", classes="hint")

    async def on_mount(self) -> None:
        """Focus the safe choice, and tell anyone waiting for the question that it is up."""
        self.query_one("#no", Button).focus()
        wake = getattr(self.app, "wake_waiters", None)
        if wake is not None:
            await wake()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """A click answers like the keys."""
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        """Close with the operator's answer."""
        self.dismiss(answer)


class HelpScreen(ModalScreen[None]):
    """Every key of the screen it was opened from, and the console-wide keys."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, screen: Screen[Any], app: App[Any]) -> None:
        super().__init__()
        self.source = screen
        self.source_app = app
        self.entries: list[tuple[str, str]] = []

    def compose(self) -> ComposeResult:
        """A two-column table of keys."""
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        read_only = bool(getattr(self.source_app, "read_only", False))
        mutating: frozenset[str] = getattr(self.source, "MUTATING", frozenset())
        for title, bindings in (
            (self.source.title or "This screen", getattr(self.source, "BINDINGS", [])),
            ("Everywhere", [*getattr(self.source_app, "BINDINGS", [])]),
        ):
            table.add_row(f"[u]{title}[/u]", "")
            for binding in bindings:
                if not isinstance(binding, Binding):
                    continue
                keys = ", ".join(_key_name(k) for k in binding.key.split(","))
                note = " (disabled: read-only)" if read_only and binding.action in mutating else ""
                # The footer shows the short description; help the longer tooltip when there is one.
                self.entries.append((keys, f"{binding.tooltip or binding.description}{note}"))
                table.add_row(*self.entries[-1])
            table.add_row("", "")
        with Vertical(id="help"):
            yield Static("Keys", id="help-title")
            yield Static(table)
            yield Static("escape closes", classes="hint")


def _key_name(key: str) -> str:
    names = {"question_mark": "?", "slash": "/", "right_square_bracket": "]", "left_square_bracket": "["}
    return names.get(key, key)


class HealthScreen(ModalScreen[None]):
    """The banner's findings in full (the banner cuts each to one line), with what to run about each."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,exclamation_mark,q", "dismiss", "Close")]

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__()
        self.findings = findings

    def compose(self) -> ComposeResult:
        """One paragraph per finding."""
        from console.widgets.banner import FIXES

        with VerticalScroll(id="help"):
            yield Static("Health (same checks as mailroom health)", id="help-title")
            if not self.findings:
                yield Static("Mail is flowing: nothing to report.")
            for f in self.findings:
                mark = "✖ problem" if f.severity == PROBLEM else "▲ warning"
                fix = FIXES.get(f.kind, "")
                yield Static(
                    f"[b]{mark}[/b]: {escape(f.text)}\n  here: {fix}\n  command line: {escape(f.advice or '-')}\n"
                )
            yield Static("escape closes", classes="hint")
