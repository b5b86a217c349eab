"""Senders: every sender account with today's usage and its standing; pause, suspend and resume."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from console.screens.base import DataScreen, fill_table, selected_key
from console.screens.confirm import confirm_sender
from console.widgets.cells import ago, one_line, rate_cell, status_cell, usage
from console.widgets.table import ConsoleTable


class SendersScreen(DataScreen[list[dict[str, Any]]]):
    """Sender accounts: status, today's sent against the limit, bounces, errors, the hard-bounce and
    complaint rates over the last deliveries (red past `mailroom health`'s thresholds), warm-up, last use."""

    MODE = "senders"
    TITLE = "Senders"
    TABLES = frozenset({"sender_accounts", "send_logs", "email_queue", "bounce_events"})
    MUTATING = frozenset({"pause", "suspend", "resume"})
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "Pause", tooltip="Pause the selected sender until resumed"),
        Binding("s", "suspend", "Suspend", tooltip="Suspend the selected sender (asks)"),
        Binding("u", "resume", "Resume", tooltip="Resume the selected sender (asks)"),
        *DataScreen.BINDINGS,
    ]
    # Whether the terminal was wide enough for every column when the screen was mounted.
    wide = True

    def compose(self) -> ComposeResult:
        """One table."""
        yield from self.compose_header()
        yield ConsoleTable(id="senders", cursor_type="row", zebra_stripes=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        """Columns."""
        table = self.query_one("#senders", DataTable)
        # Columns by priority: below 100 columns the warm-up and last use give way so the reason (why a
        # sender does not send) stays, cut to the room left; Enter shows every field in full.
        self.wide = self.app.size.width >= 100
        if self.wide:
            table.add_columns(
                "Sender",
                "Status",
                "Sent today",
                "Bounces",
                "Errors",
                "Hard %",
                "Spam %",
                "Warm-up",
                "Last used",
                "Reason",
            )
        else:
            table.add_columns("Sender", "Status", "Sent today", "Bnc", "Hard%", "Spam%", "Reason")

    async def fetch(self) -> list[dict[str, Any]]:
        """Every sender account (there are few), with what its last DNS check found when that was bad."""
        from worker.ops.dns_checks.store import FINDINGS

        rows = await self.console.data.senders(
            self.console.clock(), self.console.settings.health_reputation_deliveries
        )
        return with_dns(rows, await self.console.data.fetch(FINDINGS, {"name": None, "worst": True}))

    def show(self, data: list[dict[str, Any]]) -> None:
        """Rows keyed by account name (the worker's actions take names)."""
        now = self.console.clock()
        # From 140 columns the usage bar and the warm-up's daily cap get their full width.
        roomy = self.app.size.width >= 140
        rows = [
            s
            for s in data
            if not self.filter_text or self.filter_text.lower() in f"{s['name']} {s['status']}".lower()
        ]
        self.remember("senders", {str(s["name"]): s for s in rows})
        table = self.query_one("#senders", DataTable)
        table.border_title = self.subtitle(f"Sender accounts ({len(rows)})")
        fill_table(
            table,
            (
                (
                    str(s["name"]),
                    (
                        s["name"],
                        status_cell(str(s["status"])),
                        usage(int(s["sent_today"]), int(s["effective_limit"]), 12 if roomy else 6),
                        Text(str(s["bounces_today"]), justify="right"),
                        *((Text(str(s["errors_today"]), justify="right"),) if self.wide else ()),
                        *self._standing(s),
                        *(
                            (
                                _warmup(s, roomy),
                                ago(s["last_used_at"], now),
                                one_line(_reason(s), max(12, self.app.size.width - (110 if roomy else 94))),
                            )
                            if self.wide
                            else (one_line(_reason(s), max(8, self.app.size.width - 66)),)
                        ),
                    ),
                )
                for s in rows
            ),
        )

    def _standing(self, sender: dict[str, Any]) -> tuple[Text, Text]:
        """Hard bounces and complaints among the sender's last deliveries, as `mailroom health` judges them."""
        settings = self.console.settings
        enough = settings.health_min_attempts
        deliveries = int(sender["deliveries"])
        return (
            rate_cell(
                int(sender["hard_bounces"]), deliveries, settings.health_max_bounce_rate, enough=enough
            ),
            rate_cell(
                int(sender["complaints"]), deliveries, settings.health_max_complaint_rate, enough=enough
            ),
        )

    def _selected(self) -> str | None:
        return selected_key(self.query_one("#senders", DataTable))

    def _set(self, name: str, target: str, verb: str) -> None:
        from worker.ops.senders import set_sender_status

        actor = self.console.actor

        def act(conn: Any) -> str:
            reason = None if target == "active" else f"{verb} from the console"
            status = set_sender_status(conn, name, target, reason, actor=actor)
            return f"sender account {name} is now {status.replace('_', ' ')}"

        self.console.perform(act, what=f"{verb} {name}")

    def action_pause(self) -> None:
        """Stop sending through the selected account until resumed."""
        if (name := self._selected()) is not None:
            self._set(name, "paused", "paused")
        else:
            self.console.say("no sender account selected", severity="warning")

    @work(group="confirm")
    async def action_suspend(self) -> None:
        """Take the selected account out of service (asks, saying whether mail still flows)."""
        if (name := self._selected()) is not None:
            await confirm_sender(self, name, "suspended")
        else:
            self.console.say("no sender account selected", severity="warning")

    @work(group="confirm")
    async def action_resume(self) -> None:
        """Send through the selected account again (asks)."""
        if (name := self._selected()) is not None:
            await confirm_sender(self, name, "active")
        else:
            self.console.say("no sender account selected", severity="warning")


def with_dns(rows: list[dict[str, Any]], findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each sender row with `dns` (`DNS problem: dkim_mismatch`, ...) when its last DNS check found a warning or
    a problem; rows of senders without one are left as they are."""
    from worker.ops.dns_checks import DnsFinding, standing

    found: dict[str, list[DnsFinding]] = {}
    for f in findings:
        found.setdefault(str(f["name"]), []).append(
            DnsFinding(f["domain"], f["severity"], f["code"], f["detail"])
        )
    return [{**r, "dns": f"DNS {standing(found[r['name']])}"} if r["name"] in found else r for r in rows]


def _reason(sender: dict[str, Any]) -> str | None:
    """Why the sender does not send; else what its DNS check found."""
    return sender["status_reason"] or sender.get("dns")


def _warmup(sender: dict[str, Any], wide: bool) -> str:
    # Stage 0 is both "finished" and "never warmed up": say only that no warm-up is under way.
    if not sender["warmup_stage"]:
        return "—"
    stage = f"stage {sender['warmup_stage']}"
    return f"{stage} ({sender['warmup_limit']}/day)" if wide else stage
