"""One email in full, with every attempt from its send log."""

from __future__ import annotations

from datetime import UTC
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from console.context import ConsoleContext, Reload, context_of
from console.screens.base import fill_table, literal
from console.screens.confirm import confirm_cancel, confirm_retry
from console.widgets.banner import Banner
from console.widgets.cells import ago, attempts_made, masked, one_line, status_cell
from console.widgets.dialogs import RowScreen
from console.widgets.header import ConsoleHeader
from console.widgets.table import ConsoleTable

OUTCOME_STYLES = {"sent": "green", "transient": "yellow", "local_error": "yellow", "suppressed": "magenta"}


class EmailDetailScreen(Screen[None]):
    """Pushed from Failures with Enter; Escape returns. Kept live like the screen it came from."""

    TITLE = "Email"
    TABLES = frozenset({"email_queue", "send_logs"})
    MUTATING = frozenset({"retry", "cancel"})
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.pop_screen", "Back"),
        Binding("r", "retry", "Retry", tooltip="Retry this email (asks)"),
        Binding("c", "cancel", "Cancel email", tooltip="Cancel this email (asks)"),
    ]

    def __init__(self, email_id: int) -> None:
        super().__init__()
        self.email_id = email_id
        self.wide = True
        self.attempts: dict[str, dict[str, Any]] = {}

    def compose(self) -> ComposeResult:
        """The console's header, the email's fields, then its attempts."""
        yield ConsoleHeader("failures")
        yield Banner()
        yield Static(id="email-fields", classes="panel")
        yield ConsoleTable(id="history", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        """Columns, then load."""
        self.query_one("#email-fields").border_title = f"Email {self.email_id}"
        table = self.query_one("#history", DataTable)
        table.border_title = "Send log"
        # Columns by priority: below 100 columns the sender and duration give way to the response, and the
        # date loses its year; Enter on an attempt shows it in full.
        self.wide = self.app.size.width >= 100
        if self.wide:
            table.add_columns("When (UTC)", "Try", "Outcome", "Code", "Sender", "ms", "Response")
        else:
            table.add_columns("When (UTC)", "Try", "Outcome", "Code", "Response")
        self._load()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide retry and cancel in read-only mode."""
        return not (action in self.MUTATING and context_of(self).read_only)

    @work(group="confirm")
    async def action_retry(self) -> None:
        """Retry this email (asks first, with the consequence)."""
        await confirm_retry(self, [self.email_id])

    @work(group="confirm")
    async def action_cancel(self) -> None:
        """Cancel this email (asks first)."""
        await confirm_cancel(self, [self.email_id])

    def on_reload(self, message: Reload) -> None:
        """Reload when the email or the send log changed (the worker retried it, an operator cancelled it)."""
        if message.concerns(self.TABLES):
            self._load()

    @work(exclusive=True, group="detail", exit_on_error=False)
    async def _load(self) -> None:
        app = context_of(self)
        load = app.begin_load()
        try:
            email, history = await app.data.email_detail(self.email_id)
        except Exception as exc:  # shown, not swallowed
            app.say(f"email {self.email_id}: {exc}".splitlines()[0], severity="error")
            self.query_one("#email-fields", Static).update(
                Text(f"email {self.email_id} could not be read (see the notification)", style="red")
            )
            await app.wake_waiters()
            return
        self._show(app, email, history)
        await app.data_shown(self, load)

    def _show(self, app: ConsoleContext, email: dict[str, Any] | None, history: list[dict[str, Any]]) -> None:
        now = app.clock()
        fields = self.query_one("#email-fields", Static)
        if email is None:
            fields.update(Text(f"email {self.email_id} no longer exists", style="yellow"))
            return
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column()
        for label, value in (
            ("status", status_cell(str(email["status"]))),
            ("recipient", masked(email["recipient_email"])),
            ("subject", one_line(email["subject"], 100)),
            ("template", email["template"] or "-"),
            ("campaign", email["campaign_id"] or "-"),
            ("priority", str(email["priority"])),
            (
                "attempts",
                f"{attempts_made(str(email['status']), int(email['retry_count']))} made"
                f" of at most {int(email['max_retries']) + 1}",
            ),
            ("created", ago(email["created_at"], now)),
            ("next retry", ago(email["next_retry_at"], now)),
            ("last error", Text(one_line(email["last_error"], 200), style="red")),
        ):
            grid.add_row(label, literal(value))  # a Rich table reads str cells as markup too
        fields.update(grid)
        table = self.query_one("#history", DataTable)
        table.border_subtitle = "" if history else "no attempts yet"
        self.attempts = {f"{row['id']}:{row['attempted_at'].isoformat()}": row for row in history}
        response_width = 60 if self.wide else max(12, self.app.size.width - 46)
        fill_table(
            table, ((key, _attempt(row, self.wide, response_width)) for key, row in self.attempts.items())
        )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on an attempt shows it in full (the response is cut to the column)."""
        row = self.attempts.get(str(event.row_key.value))
        if row is not None:
            event.stop()
            self.app.push_screen(RowScreen(f"Email {self.email_id}, attempt {row['attempt']}", row))


def _attempt(row: dict[str, Any], wide: bool, response_width: int) -> tuple[Any, ...]:
    code = " ".join(str(x) for x in (row["smtp_code"], row["enhanced_code"]) if x)
    when = row["attempted_at"].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S" if wide else "%m-%d %H:%M:%S")
    extra = (
        (row["sender"] or "-", "" if row["duration_ms"] is None else str(row["duration_ms"])) if wide else ()
    )
    return (
        when,
        str(row["attempt"]),
        Text(str(row["outcome"]), style=OUTCOME_STYLES.get(str(row["outcome"]), "red")),
        code or "-",
        *extra,
        one_line(row["response"], response_width),
    )
