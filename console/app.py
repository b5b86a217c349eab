"""The operators' console: screens switched by number keys, kept live by LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer

from console.context import MORE_SCREENS, SCREENS, Action, DomainActions, Reload
from console.live import ALL_TABLES, Coalescer, LiveFeed
from console.queries import ConsoleData
from console.screens.accounts import AccountsScreen
from console.screens.audit import AuditScreen
from console.screens.confirm import confirm_retry
from console.screens.dmarc import DmarcScreen
from console.screens.failures import FailuresScreen
from console.screens.overview import OverviewScreen
from console.screens.queue import QueueScreen
from console.screens.schedule import ScheduleScreen
from console.screens.senders import SendersScreen
from console.screens.signatures import SignaturesScreen
from console.screens.suppressions import SuppressionsScreen
from console.screens.webhooks import WebhooksScreen
from console.widgets.dialogs import HealthScreen, HelpScreen
from worker.core.config import Settings
from worker.ops.audit import console_actor
from worker.ops.health import Finding, check_health

FALLBACK_REFRESH_SECONDS = 30.0
# Keys the palette leaves out: moving around a table is not a command.
PALETTE_SKIPS = frozenset({"filter", "page(1)", "page(-1)", "app.pop_screen", "mark"})
# Changes that can start or end a health finding; heartbeats and time are caught by the fallback timer.
HEALTH_TABLES = frozenset(
    {ALL_TABLES, "email_queue", "sender_accounts", "send_logs", "bounce_list", "bounce_events"}
)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def database_label(url: str) -> str:
    """What the header calls the database: name@host, never the password."""
    parts = conninfo_to_dict(url)
    host = str(parts.get("host") or "local")
    if host.startswith("/"):
        host = "local"
    return f"{parts.get('dbname') or '?'}@{host}"


class MailroomConsole(App[int]):
    """Mailroom's console. Reads through one `ConsoleData`; acts through `worker.ops` and the `DomainActions` given.

    It implements `console.context.ConsoleContext`, the only face of it that screens and widgets see.
    """

    CSS_PATH = "console.tcss"
    TITLE = "Mailroom"
    ENABLE_COMMAND_PALETTE = True
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = {
        "overview": OverviewScreen,
        "failures": FailuresScreen,
        "senders": SendersScreen,
        "accounts": AccountsScreen,
        "signatures": SignaturesScreen,
        "schedule": ScheduleScreen,
        "queue": QueueScreen,
        "audit": AuditScreen,
        "dmarc": DmarcScreen,
        "suppressions": SuppressionsScreen,
        "webhooks": WebhooksScreen,
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        *(
            Binding(key, f"switch_mode('{mode}')", title, show=False)
            for mode, key, title in (*SCREENS, *MORE_SCREENS)
        ),
        Binding("question_mark", "help", "Help"),
        Binding("exclamation_mark", "health", "Health", show=False, tooltip="The banner's findings in full"),
        Binding("ctrl+p", "command_palette", "Commands", show=False),
        Binding("q", "quit", "Quit"),
    ]

    live_state: reactive[str] = reactive("connecting")
    updated_at: reactive[datetime | None] = reactive(None)
    findings: reactive[list[Finding]] = reactive(list, always_update=True)

    def __init__(
        self,
        url: str,
        settings: Settings,
        actions: DomainActions,
        *,
        read_only: bool = False,
        clock: Callable[[], datetime] = _utc_now,
        label: str | None = None,
        coalesce_seconds: float = 0.25,
        actor: str | None = None,
    ) -> None:
        super().__init__()
        self.url = url
        self.settings = settings
        self.read_only = read_only
        self.actions = actions
        self.clock = clock
        self.label = label or database_label(url)
        self.actor = actor or console_actor()
        self.data = ConsoleData(url)
        self.feed = LiveFeed(url, self._on_change, self._on_state, on_complaint=self._on_complaint)
        self.coalescer = Coalescer(self._reload_screen, self._schedule, interval=coalesce_seconds)
        self.notices: list[tuple[str, str]] = []
        self.states: list[str] = []
        self.refreshes = 0
        # Each screen's last data shown, by the number of the load that read it (`begin_load`): a wait
        # for what a key asked (another screen, another page) must not take a load begun before it,
        # landing late, for the one the key began.
        self.loads_begun = 0
        self.shown_by: dict[object, int] = {}
        self.health_checks = 0
        self._refreshed = asyncio.Condition()
        self._feed_task: asyncio.Task[None] | None = None
        self._fallback: Timer | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def on_mount(self) -> None:
        """Show the overview, start listening, and arm the slow fallback timer."""
        await self.switch_mode("overview")
        self._feed_task = asyncio.create_task(self.feed.run(), name="mailroom-console-listen")
        self._fallback = self.set_interval(
            FALLBACK_REFRESH_SECONDS, lambda: self._reload_screen({ALL_TABLES})
        )

    async def on_unmount(self) -> None:
        """Stop listening and close the read connection."""
        if self._feed_task is not None:
            self._feed_task.cancel()
            await asyncio.gather(self._feed_task, return_exceptions=True)
        await self.data.close()

    # --- live updates -------------------------------------------------------------------

    def _on_change(self, tables: set[str]) -> None:
        self.coalescer.add(tables)

    def _on_complaint(self, notice: dict[str, object]) -> None:
        email = notice.get("email_id")
        self.say(
            f"a recipient of email {email} reported it as spam: the address is suppressed"
            " (mailroom bounces list --kind complaint)",
            severity="warning",
        )

    def _on_state(self, state: str) -> None:
        before = self.states[-1] if self.states else "connecting"
        self.states.append(state)
        self.live_state = state
        # Said once each way, however long the database is away (a restart, a failover).
        if state == "reconnecting" and before == "live":
            self.say(f"lost the database ({self.feed.lost_because}); reconnecting", severity="warning")
        elif state == "live" and before == "reconnecting":
            self.data.renew()  # the reads follow the feed, to the new primary after a failover
            self.say("reconnected to the database; everything shown is read again")

    def _schedule(self, delay: float, callback: Callable[[], None]) -> object:
        return self.set_timer(max(delay, 0.01), callback)

    def _reload_screen(self, tables: set[str]) -> None:
        if not self.screen_stack:  # shutting down: a timer fired after the last screen went
            return
        if tables & HEALTH_TABLES:
            self._check_health()
        self.screen.post_message(Reload(tables))

    def request_refresh(self) -> None:
        """Refresh the visible screen now (after an action, or when a screen is shown)."""
        self.coalescer.add({ALL_TABLES})

    def begin_load(self) -> int:
        """A screen begins reading its data: the load's number, for `data_shown`."""
        self.loads_begun += 1
        return self.loads_begun

    async def data_shown(self, screen: object = None, load: int = 0) -> None:
        """A screen finished showing the data of its load number `load`: stamp the header and wake
        anyone waiting for it."""
        self.updated_at = self.clock()
        self.refreshes += 1
        self.shown_by[screen] = load
        await self.wake_waiters()

    async def wake_waiters(self) -> None:
        """Let `wait_until_shown` callers re-check their condition (a dialog opened, data arrived)."""
        async with self._refreshed:
            self._refreshed.notify_all()

    async def wait_until_shown(self, predicate: Callable[[], bool], within: float) -> bool:
        """Wait until `predicate` holds after a refresh (for tests and scripts); False on timeout."""

        async def _wait() -> None:
            async with self._refreshed:
                await self._refreshed.wait_for(predicate)

        try:
            await asyncio.wait_for(_wait(), within)
        except TimeoutError:
            return False
        return True

    @work(exclusive=True, group="health", exit_on_error=False)
    async def _check_health(self) -> None:
        """Run `mailroom health`'s checks on the console's clock; the banner follows `findings`."""
        now = self.clock()
        try:
            report = await self.ask(lambda c: check_health(c, self.settings, now=now))
        except Exception as exc:  # a failed check leaves the last banner up, and says why
            self.say(f"health check failed: {_first_line(exc)}", severity="error")
            return
        self.findings = list(report.findings)
        self.health_checks += 1
        await self.wake_waiters()

    # --- actions ------------------------------------------------------------------------

    def say(self, text: str, *, severity: str = "information") -> None:
        """Notify the operator and keep the text (tests read `notices`)."""
        self.notices.append((severity, text))
        self.notify(text, severity=severity)  # type: ignore[arg-type]

    def perform(self, action: Action, *, what: str) -> None:
        """Run a mutating worker function in its own transaction off the UI thread, then notify and refresh."""
        if self.read_only:
            self.say(f"read-only console: {what} is disabled", severity="warning")
            return
        self.run_worker(self._perform(action, what), group="actions", exit_on_error=False)

    async def _perform(self, action: Action, what: str) -> None:
        try:
            text = await asyncio.to_thread(self._in_transaction, action)
        except Exception as exc:  # every failure is the operator's to see, never a silently dead worker
            self.say(f"{what} failed: {_first_line(exc)}", severity="error")
        else:
            self.say(text)
        self.request_refresh()

    def _in_transaction(self, action: Action) -> str:
        from worker.core.db import connect

        with connect(self.url) as conn:
            return action(conn)

    async def ask(self, action: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """Run a read-only worker function (a count for a confirmation) off the UI thread."""
        return await asyncio.to_thread(self._in_transaction, action)

    # --- keys and palette ---------------------------------------------------------------

    def action_health(self) -> None:
        """Show the banner's findings in full, wrapped."""
        self.push_screen(HealthScreen(list(self.findings)))

    def action_help(self) -> None:
        """Show every key of this screen and of the console."""
        self.push_screen(HelpScreen(self.screen, self))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The palette: the actions of the screen underneath (retry, cancel, suspend, resume...), every screen,
        retrying every failed email, help and quit."""
        yield from screen_commands(screen, self.read_only)
        if not self.read_only:
            yield SystemCommand("Retry every failed email", "Asks first, with the count", self._retry_all)
        for mode, key, title in (*SCREENS, *MORE_SCREENS):
            yield SystemCommand(f"{title} screen", f"Switch to {title} ({key})", _switcher(self, mode))
        yield SystemCommand("Help", "Every key of this screen (?)", self.action_help)
        yield SystemCommand("Refresh", "Reload this screen now", self.request_refresh)
        yield SystemCommand("Quit", "Leave the console (q)", self.exit)

    def _retry_all(self) -> None:
        self.run_worker(confirm_retry(self.screen, None), group="confirm", exit_on_error=False)


def screen_commands(screen: Screen[Any], read_only: bool) -> Iterable[SystemCommand]:
    """A palette entry for every action key of `screen` (not navigation), named as its help names it."""
    mutating: frozenset[str] = getattr(screen, "MUTATING", frozenset())
    for binding in getattr(screen, "BINDINGS", []):
        if not isinstance(binding, Binding) or binding.action in PALETTE_SKIPS:
            continue
        if read_only and binding.action in mutating:
            continue
        key = binding.key.split(",")[0]
        yield SystemCommand(
            f"{binding.description} ({key})",
            binding.tooltip or binding.description,
            _runner(screen, binding.action),
        )


def _runner(screen: Screen[Any], action: str) -> Callable[[], None]:
    def run() -> None:
        screen.run_worker(screen.run_action(action), exit_on_error=False)

    return run


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _switcher(app: MailroomConsole, mode: str) -> Callable[[], None]:
    def switch() -> None:
        app.switch_mode(mode)

    return switch


def run_console(url: str, settings: Settings, actions: DomainActions, *, read_only: bool = False) -> int:
    """Run the console against `url` until the operator quits; return the exit status."""
    app = MailroomConsole(url, settings, actions, read_only=read_only)
    result = app.run()
    return int(result or 0)
