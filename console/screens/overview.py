"""Overview: queue depth, the last hour's sending, sender accounts, opens, clicks and unsubscribes per hour,
signatures and the latest failures."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Sparkline, Static

from console.figures import RATE_WINDOW
from console.queries import TRACKING_KINDS, Overview
from console.screens.base import COMPACT_BELOW, DataScreen, fill_table
from console.screens.detail import EmailDetailScreen
from console.widgets.cells import (
    ago,
    duration,
    masked,
    one_line,
    progress,
    spark,
    status_cell,
    usage,
)
from console.widgets.table import ConsoleTable

TRACKING_STYLES = {"opens": "cyan", "clicks": "green", "unsubscribes": "yellow"}


class OverviewScreen(DataScreen[Overview]):
    """The first screen: is mail flowing, and what needs an operator."""

    MODE = "overview"
    TITLE = "Overview"
    TABLES = frozenset(
        {
            "email_queue",
            "send_logs",
            "sender_accounts",
            "documents",
            "expected_signers",
            "signatures",
            "open_events",
            "click_events",
            "unsubscribe_list",
        }
    )

    def compose(self) -> ComposeResult:
        """Queue and throughput side by side, senders, then signatures beside the latest failures."""
        yield from self.compose_header()
        with VerticalScroll(id="overview"):
            with Horizontal(classes="row"):
                yield Static(id="depth", classes="panel")
                with Vertical(id="throughput", classes="panel"):
                    yield Sparkline([0.0] * 60, id="sent-sparkline")
                    yield Static(id="rates")
            yield ConsoleTable(id="ov-senders", classes="panel", cursor_type="row", show_cursor=False)
            yield Static(id="tracking", classes="panel")
            with Horizontal(id="bottom-row", classes="row"):
                yield Static(id="documents", classes="panel")
                yield ConsoleTable(id="ov-failures", classes="panel", cursor_type="row", show_cursor=False)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Titles and columns."""
        self._arrange(self.app.size.width)
        self.query_one("#depth").border_title = "Queue"
        self.query_one("#throughput").border_title = f"Sent per minute, {RATE_WINDOW}"
        self.query_one("#tracking").border_title = "Opens, clicks and unsubscribes per hour"
        self.query_one("#documents").border_title = "Signatures"
        senders = self.query_one("#ov-senders", DataTable)
        senders.border_title = "Sender accounts"
        senders.add_columns("Sender", "Status", "Today", "Bnc", "Err", "Warm-up", "Last used")
        failures = self.query_one("#ov-failures", DataTable)
        failures.border_title = "Latest failures"
        failures.add_columns("Recipient", "Error", "Failed")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a latest failure opens the email; on a sender, the sender in full."""
        if event.data_table.id == "ov-failures" and event.row_key.value is not None:
            event.stop()
            self.app.push_screen(EmailDetailScreen(int(event.row_key.value)))
            return
        super().on_data_table_row_selected(event)

    def on_resize(self, event: events.Resize) -> None:
        """Signatures beside the latest failures when wide, above them when narrow."""
        self._arrange(event.size.width)

    def _arrange(self, width: int) -> None:
        self.query_one("#bottom-row").set_class(width < COMPACT_BELOW, "-narrow")

    async def fetch(self) -> Overview:
        """One round of overview queries."""
        return await self.console.data.overview(self.console.clock(), text=self.filter_text)

    def show(self, data: Overview) -> None:
        """Fill every panel."""
        now = self.console.clock()
        self.query_one("#depth", Static).update(_depth_table(data, now))
        self.query_one("#sent-sparkline", Sparkline).data = list(data.sent_per_minute)
        self.query_one("#rates", Static).update(_rates(data))
        bar_width = 10 if self.app.size.width >= 100 else 4
        needle = (self.filter_text or "").lower()
        senders = [s for s in data.senders if needle in str(s["name"]).lower()]
        self.remember("ov-senders", {str(s["id"]): s for s in senders})
        documents = data.documents  # filtered by the query: the top few of every match, not of all
        self.query_one("#ov-senders", DataTable).border_title = self.subtitle("Sender accounts")
        fill_table(
            self.query_one("#ov-senders", DataTable),
            (
                (
                    str(s["id"]),
                    (
                        s["name"],
                        status_cell(str(s["status"])),
                        usage(int(s["sent_today"]), int(s["effective_limit"]), bar_width),
                        Text(str(s["bounces_today"]), justify="right"),
                        Text(str(s["errors_today"]), justify="right"),
                        f"stage {s['warmup_stage']}" if s["warmup_stage"] else "done",
                        ago(s["last_used_at"], now),
                    ),
                )
                for s in senders
            ),
        )
        self.query_one("#tracking", Static).update(_tracking(data, 2 if self.app.size.width >= 100 else 1))
        self.query_one("#documents", Static).update(_documents(documents))
        fill_table(
            self.query_one("#ov-failures", DataTable),
            (
                (
                    str(f["id"]),
                    (
                        masked(f["recipient_email"]),
                        one_line(f["last_error"], _error_width(self.app.size.width)),
                        ago(f["finished_at"], now),
                    ),
                )
                for f in data.latest_failures
            ),
        )


def _depth_table(data: Overview, now: Any) -> Table:
    c = data.counts
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    oldest = data.oldest_due
    rows: list[tuple[str, str, str]] = [
        ("pending", "pending", "bold"),
        ("  due now", "due_now", ""),
        ("  scheduled later", "scheduled_later", ""),
        ("  retrying", "retrying", "yellow" if c["retrying"].value else ""),
        ("assigned", "assigned", ""),
        ("failed", "failed", "bold red" if c["failed"].value else ""),
        ("suppressed", "suppressed", ""),
    ]
    for label, key, style in rows:
        table.add_row(label, Text(c[key].label(), style=style))
    table.add_row("oldest due", duration((now - oldest).total_seconds()) if oldest else "-")
    return table


def _rates(data: Overview) -> Text:
    """Sent, then the attempt failure rate beside the final failure rate, each saying what it is out of."""
    r = data.rates
    text = Text()
    text.append(f"{int(sum(data.sent_per_minute)):,}", style="bold")
    text.append(f" sent, {RATE_WINDOW}\n")
    attempt, final = r.attempt_failure_rate, r.final_failure_rate
    text.append("attempts failed ", style="dim")
    text.append(
        "-" if attempt is None else f"{attempt:.1%}", style="bold red" if (attempt or 0) >= 0.05 else "bold"
    )
    text.append(f" of {r.attempts:,}\n")
    text.append("email failed    ", style="dim")
    text.append(
        "-" if final is None else f"{final:.1%}", style="bold red" if (final or 0) >= 0.05 else "bold"
    )
    text.append(f" of {r.finished:,} finished")
    return text


def _error_width(width: int) -> int:
    """Room for the error in the latest failures: half the screen when wide, nearly all of it when not."""
    return max(12, width - 42) if width < COMPACT_BELOW else max(12, width // 2 - 38)


def _tracking(data: Overview, cell_width: int) -> Table:
    """One line per kind: a sparkline of the last 24 hours, the last hour's count and the day's."""
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    hours = 24 * cell_width
    table.add_row(
        "",
        Text("24h ago".ljust(hours - 3) + "now", style="dim"),
        Text("last hour", style="dim"),
        Text("24 hours", style="dim"),
    )
    for kind in TRACKING_KINDS:
        values = data.tracking.get(kind, [0] * 24)
        table.add_row(
            kind,
            spark(values, TRACKING_STYLES[kind], cell_width),
            Text(f"{values[-1]:,}", style="bold" if values[-1] else ""),
            f"{sum(values):,}",
        )
    return table


def _documents(documents: list[dict[str, Any]]) -> Table | Text:
    if not documents:
        return Text("no documents awaiting signatures", style="dim")
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True, max_width=14, overflow="ellipsis")
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    for doc in documents:
        expected, signed = int(doc["expected"]), int(doc["signed"])
        missing = expected - signed
        table.add_row(
            str(doc["doc_id"]),
            progress(signed, expected, 6),
            Text(f"{missing} missing" if missing else "complete", style="yellow" if missing else "green"),
        )
    return table
