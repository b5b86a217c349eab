"""Signatures: per document, expected and signed counts and who is missing; send reminders."""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from console.screens.base import DataScreen, fill_table, selected_key
from console.widgets.cells import ago, masked, progress
from console.widgets.dialogs import ConfirmScreen
from console.widgets.table import ConsoleTable


class SignedDocuments(NamedTuple):
    """Documents with their signing progress, the one selected (or the first) and its missing signers."""

    documents: list[dict[str, Any]]
    doc_id: str | None
    missing: list[dict[str, Any]]


class SignaturesScreen(DataScreen[SignedDocuments]):
    """Documents, incomplete first, and the missing signers of the selected one."""

    MODE = "signatures"
    TITLE = "Signatures"
    TABLES = frozenset({"documents", "expected_signers", "signatures", "reminder_logs"})
    MUTATING = frozenset({"remind"})
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "remind", "Send reminders"),
        *DataScreen.BINDINGS,
    ]

    def compose(self) -> ComposeResult:
        """Documents above, missing signers below."""
        yield from self.compose_header()
        yield ConsoleTable(id="documents", cursor_type="row", zebra_stripes=True)
        yield ConsoleTable(id="missing", cursor_type="row", show_cursor=False)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        self.query_one("#documents", DataTable).add_columns(
            "Document", "Title", "Signed", "Expected", "Missing"
        )
        self.query_one("#missing", DataTable).add_columns("Name", "Email", "Last reminder")

    async def fetch(self) -> SignedDocuments:
        """Documents, then the missing signers of the selected (or first) document."""
        documents = await self.console.data.documents(text=self.filter_text)
        current = selected_key(self.query_one("#documents", DataTable))
        ids = [str(d["doc_id"]) for d in documents]
        doc_id = current if current in ids else (ids[0] if ids else None)
        missing = await self.console.data.missing_signers(doc_id) if doc_id else []
        return SignedDocuments(documents, doc_id, missing)

    def show(self, data: SignedDocuments) -> None:
        """Both tables."""
        documents, doc_id, missing = data
        self.remember("documents", {str(d["doc_id"]): d for d in documents})
        table = self.query_one("#documents", DataTable)
        table.border_title = self.subtitle(f"Documents ({len(documents)})")
        fill_table(
            table,
            (
                (
                    str(d["doc_id"]),
                    (
                        d["doc_id"],
                        d["title"] or "-",
                        progress(int(d["signed"]), int(d["expected"]), 12),
                        Text(str(d["expected"]), justify="right"),
                        Text(
                            str(int(d["expected"]) - int(d["signed"])),
                            justify="right",
                            style="yellow" if int(d["expected"]) > int(d["signed"]) else "green",
                        ),
                    ),
                )
                for d in documents
            ),
        )
        self._show_missing(doc_id, missing)

    def _show_missing(self, doc_id: str | None, missing: list[dict[str, Any]]) -> None:
        now = self.console.clock()
        table = self.query_one("#missing", DataTable)
        table.border_title = f"Missing signers of {doc_id} ({len(missing)})" if doc_id else "Missing signers"
        fill_table(
            table,
            (
                (str(m["email"]), (m["name"] or "-", masked(m["email"]), ago(m["last_reminded_at"], now)))
                for m in missing
            ),
        )

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Moving over a document shows its missing signers."""
        if event.data_table.id == "documents" and event.row_key.value is not None:
            self._load_missing(event.row_key.value)

    @work(exclusive=True, group="missing", exit_on_error=False)
    async def _load_missing(self, doc_id: str) -> None:
        self._show_missing(doc_id, await self.console.data.missing_signers(doc_id))

    @work(group="confirm", exit_on_error=False)
    async def action_remind(self) -> None:
        """Mail every missing signer of the selected document (asks first, saying how many)."""
        doc_id = selected_key(self.query_one("#documents", DataTable))
        if doc_id is None:
            self.console.say("no document selected", severity="warning")
            return
        settings, actions = self.console.settings, self.console.actions
        try:
            count = int(
                await self.console.ask(lambda conn: actions.reminder_candidates(conn, doc_id, settings))
            )
        except Exception as exc:  # shown, not swallowed
            self.console.say(f"reminders failed: {exc}".splitlines()[0], severity="error")
            return
        if count == 0:
            self.console.say(f"no reminders to send for {doc_id}", severity="warning")
            return
        question = f"Send reminders for {doc_id}? {count} signer(s) will be mailed."
        if not await self.app.push_screen_wait(ConfirmScreen(question, confirm="Send")):
            return

        def act(conn: Any) -> str:
            return actions.send_reminders(conn, doc_id, settings)

        self.console.perform(act, what="send reminders")
