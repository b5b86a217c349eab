"""DMARC reports: pass and fail by From domain and source address over the last 30 days (what `mailroom dmarc report` shows).

The reports are unauthenticated claims (anyone can mail one in any reporter's name): the table's title
says so, and a source whose reports another report with the same organisation and id contradicted is
marked DISPUTED.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NamedTuple

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable

from console.screens.base import DataScreen, fill_table
from console.widgets.cells import one_line
from console.widgets.table import ConsoleTable
from worker.ops.dmarc_report import SENDER_DOMAINS, SOURCES

DAYS = 30


class DmarcSources(NamedTuple):
    """The sources reports named, and the From domains of our sender accounts (whose failures are flagged)."""

    rows: list[dict[str, Any]]
    ours: set[str]


class DmarcScreen(DataScreen[DmarcSources]):
    """Sources sending in our domains' names, most failed messages first; failing ones for a sender's domain
    flagged, and those of disputed reports marked."""

    MODE = "dmarc"
    TITLE = "DMARC reports"
    TABLES = frozenset({"dmarc_reports"})

    def compose(self) -> ComposeResult:
        """One table."""
        yield from self.compose_header()
        yield ConsoleTable(id="dmarc", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """The columns."""
        table = self.query_one("#dmarc", DataTable)
        table.add_columns(
            "Domain", "Source", "Messages", "Passed", "Failed", "DKIM", "SPF", "Flag", "Reporters"
        )

    async def fetch(self) -> DmarcSources:
        """The sources of reports that ended in the last 30 days (the filter: one domain), and our From domains."""
        data = self.console.data
        since = self.console.clock() - timedelta(days=DAYS)
        domain = (self.filter_text or "").strip().lower() or None
        rows = await data.fetch(SOURCES, {"since": since, "domain": domain, "limit": data.page_size})
        ours = {str(r["domain"]) for r in await data.fetch(SENDER_DOMAINS, {})}
        return DmarcSources(rows, ours)

    def show(self, data: DmarcSources) -> None:
        """Rows keyed by domain and source."""
        table = self.query_one("#dmarc", DataTable)
        rows, ours = data
        flagged = sum(1 for r in rows if self._flagged(r, ours))
        title = (
            f"DMARC reports (unauthenticated claims), last {DAYS} days: {len(rows)} sources,"
            f" {flagged} failing for our domains"
        )
        table.border_title = self.subtitle(title)
        self.remember("dmarc", {f"{r['domain']} {r['source']}": r for r in rows})
        fill_table(table, ((f"{r['domain']} {r['source']}", self._cells(r, ours)) for r in rows))

    @staticmethod
    def _flagged(row: dict[str, Any], ours: set[str]) -> bool:
        return row["domain"] in ours and int(row["messages"]) > int(row["passed"])

    def _cells(self, row: dict[str, Any], ours: set[str]) -> tuple[Any, ...]:
        messages, passed = int(row["messages"]), int(row["passed"])

        def number(value: int) -> Text:
            return Text(f"{value:,}", justify="right")

        flag = Text("FAILING ", style="bold red") if self._flagged(row, ours) else Text("")
        if int(row["disputed"]):
            flag.append("DISPUTED", style="bold yellow")
        flag.rstrip()
        return (
            one_line(row["domain"], 30),
            one_line(row["source"], 39),
            number(messages),
            number(passed),
            number(messages - passed),
            number(int(row["dkim_aligned"])),
            number(int(row["spf_aligned"])),
            flag,
            one_line(row["reporters"], 40),
        )
