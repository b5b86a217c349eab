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

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "Close"),
        Binding("j", "scroll(1)", "Down", show=False),
        Binding("k", "scroll(-1)", "Up", show=False),
    ]

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
            ("Tables", TABLE_KEYS),
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
        with VerticalScroll(id="help"):
            yield Static("Keys", id="help-title")
            yield Static(table)
            yield Static("j/k, arrows, PageUp/PageDown scroll; escape closes", classes="hint")

    def on_mount(self) -> None:
        """The keys scroll the list from the start."""
        self.query_one("#help", VerticalScroll).focus()

    def action_scroll(self, lines: int) -> None:
        """Scroll the list by `lines`."""
        self.query_one("#help", VerticalScroll).scroll_relative(y=lines, animate=False)


# Every table's keys (console.widgets.table.ConsoleTable and Textual's DataTable).
TABLE_KEYS = [
    Binding("j,down", "", "Next row"),
    Binding("k,up", "", "Previous row"),
    Binding("g,home", "", "First row"),
    Binding("G,end", "", "Last row"),
    Binding("pageup,pagedown", "", "A screenful up or down"),
    Binding("o", "", "Sort by the next column (after the last: the usual order); the header shows ▲ or ▼"),
    Binding("O", "", "Reverse the sort"),
    Binding("click", "", "A click on a column header sorts by it; again reverses"),
    Binding("tab", "", "Next table on the screen"),
]


def _key_name(key: str) -> str:
    names = {
        "question_mark": "?",
        "slash": "/",
        "right_square_bracket": "]",
        "left_square_bracket": "[",
        "exclamation_mark": "!",
    }
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


class RowScreen(ModalScreen[None]):
    """One table row in full: every field the screen read for it, long values wrapped, addresses masked."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,enter,q", "dismiss", "Close")]

    def __init__(self, title: str, row: dict[str, Any]) -> None:
        super().__init__()
        self.title_text = title
        self.row = row

    def compose(self) -> ComposeResult:
        """A two-column grid of field and value."""
        from console.widgets.cells import masked

        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(overflow="fold")
        for field, value in self.row.items():
            shown = (
                masked(str(value)) if "email" in field and value else ("-" if value in (None, "") else value)
            )
            grid.add_row(field.replace("_", " "), escape(str(shown)))
        with VerticalScroll(id="help"):
            yield Static(self.title_text, id="help-title")
            yield Static(grid)
            yield Static("escape closes", classes="hint")

    def on_mount(self) -> None:
        """Arrows scroll a long row."""
        self.query_one("#help", VerticalScroll).focus()
