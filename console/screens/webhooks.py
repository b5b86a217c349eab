"""Webhooks: every endpoint with its deliveries' state and its failures; pause and resume."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from console.screens.base import DataScreen, fill_table, selected_key
from console.widgets.cells import ago, one_line, status_cell
from console.widgets.table import ConsoleTable


class WebhooksScreen(DataScreen[list[dict[str, Any]]]):
    """Webhook endpoints: whose events, the state, events waiting, delivered in the last day and given
    up, failures in a row since when, the last success and the last error."""

    MODE = "webhooks"
    TITLE = "Webhooks"
    TABLES = frozenset({"webhook_endpoints"})
    MUTATING = frozenset({"pause", "resume"})
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "Pause", tooltip="Pause the selected endpoint: its events wait"),
        Binding("u", "resume", "Resume", tooltip="POST to the selected endpoint again"),
        *DataScreen.BINDINGS,
    ]

    def compose(self) -> ComposeResult:
        """One table."""
        yield from self.compose_header()
        yield ConsoleTable(id="webhooks", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        table = self.query_one("#webhooks", DataTable)
        table.add_columns(
            "Id", "URL", "Role", "Status", "Waiting", "Sent 24h", "Dead", "Failing", "Last OK", "Last error"
        )

    async def fetch(self) -> list[dict[str, Any]]:
        """Every endpoint (there are few) with its deliveries' counts."""
        from worker.ops.webhook_endpoints import CAN_READ_URLS, LIST, LIST_WITHOUT_URLS

        readable = (await self.console.data.fetch(CAN_READ_URLS))[0]
        return await self.console.data.fetch(LIST if next(iter(readable.values())) else LIST_WITHOUT_URLS)

    def show(self, data: list[dict[str, Any]]) -> None:
        """Rows keyed by endpoint id."""
        now = self.console.clock()
        rows = [
            e
            for e in data
            if not self.filter_text
            or self.filter_text.lower() in f"{e['url'] or ''} {e['owner_role'] or ''} {e['status']}".lower()
        ]
        self.remember("webhooks", {str(e["id"]): e for e in rows})
        table = self.query_one("#webhooks", DataTable)
        table.border_title = self.subtitle(f"Webhook endpoints ({len(rows)})")
        room = max(12, self.app.size.width - 100)
        fill_table(
            table,
            (
                (
                    str(e["id"]),
                    (
                        Text(str(e["id"]), justify="right"),
                        one_line(e["url"] or "(hidden from this role)", 40),
                        e["owner_role"] or "(every email)",
                        status_cell(str(e["status"])),
                        Text(str(e["pending"]), justify="right"),
                        Text(str(e["delivered"]), justify="right"),
                        Text(str(e["dead"]), justify="right"),
                        f"{e['failures']} since {ago(e['failing_since'], now)}"
                        if e["failing_since"]
                        else "—",
                        ago(e["last_success_at"], now),
                        one_line(e["status_reason"] or e["last_error"], room),
                    ),
                )
                for e in rows
            ),
        )

    def _set(self, status: str, verb: str) -> None:
        key = selected_key(self.query_one("#webhooks", DataTable))
        if key is None:
            self.console.say("no webhook endpoint selected", severity="warning")
            return
        from worker.ops.webhook_endpoints import set_status

        endpoint, actor = int(key), self.console.actor

        def act(conn: Any) -> str:
            set_status(conn, endpoint, status, reason=f"{verb} from the console", actor=actor)
            return f"webhook endpoint {endpoint} {verb}"

        self.console.perform(act, what=f"{verb} endpoint {endpoint}")

    def action_pause(self) -> None:
        """Stop POSTing to the selected endpoint; its events wait."""
        self._set("paused", "paused")

    def action_resume(self) -> None:
        """POST to the selected endpoint again (paused, or disabled by a 410)."""
        self._set("active", "resumed")
