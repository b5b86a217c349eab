"""What screens and widgets may use of the running console: a small interface, never the app module.

The app (`console.app.MailroomConsole`) implements `ConsoleContext`; screens reach it through
`context_of(widget)`. Actions that belong to producers (account suspension, activation, signature
reminders) come in through `DomainActions`, which whoever starts the console passes in
(`console.wiring`), so nothing below the command line imports a producer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

import psycopg
from textual.message import Message

from console.live import ALL_TABLES
from worker.core.config import Settings
from worker.core.results import ActionResult

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from console.queries import ConsoleData
    from worker.ops.health import Finding

# (mode, key, title): the order of the tabs in the header and of the number keys.
SCREENS: tuple[tuple[str, str, str], ...] = (
    ("overview", "1", "Overview"),
    ("failures", "2", "Failures"),
    ("senders", "3", "Senders"),
    ("accounts", "4", "Accounts"),
    ("signatures", "5", "Signatures"),
    ("schedule", "6", "Schedule"),
    ("queue", "7", "Queue"),
)
# Screens reached by a key (and the palette, and listed by help) but left out of the tab line, which is full
# at 80 columns; their table's title says where the operator is.
MORE_SCREENS: tuple[tuple[str, str, str], ...] = (
    ("audit", "0", "Audit trail"),
    ("dmarc", "d", "DMARC reports"),
    ("suppressions", "x", "Suppressions"),
    ("webhooks", "w", "Webhooks"),
)

Action = Callable[[psycopg.Connection[Any]], str]


class DomainActions(Protocol):
    """Operator actions owned by producers, handed to the console by the command line."""

    def suspend_accounts(self, conn: psycopg.Connection[Any], ids: list[int]) -> ActionResult:
        """Suspend user accounts."""
        ...

    def unsuspend_accounts(self, conn: psycopg.Connection[Any], ids: list[int]) -> ActionResult:
        """Lift user accounts' suspension."""
        ...

    def resend_activation(
        self, conn: psycopg.Connection[Any], ids: list[int], settings: Settings
    ) -> ActionResult:
        """Issue provisioned accounts a fresh activation token."""
        ...

    def reminder_candidates(self, conn: psycopg.Connection[Any], doc_id: str, settings: Settings) -> int:
        """How many signers of a document a reminder would mail now."""
        ...

    def send_reminders(self, conn: psycopg.Connection[Any], doc_id: str, settings: Settings) -> str:
        """Mail a document's missing signers; a one-line summary."""
        ...


class Reload(Message, bubble=False):
    """Read the screen's data again if any of `tables` concerns it (ALL_TABLES: whatever it shows).

    The app posts it to the active screen (a notification, the fallback timer, a refresh after an
    action); a table posts it to its screen when it goes back to the query's order. Screens with data
    handle it; others let it pass. Reloads still waiting in a screen's queue merge into one.
    """

    def __init__(self, tables: Iterable[str] = (ALL_TABLES,)) -> None:
        super().__init__()
        self.tables = set(tables)

    def can_replace(self, message: Message) -> bool:
        """The next reload waiting behind this one takes its tables, and this one is dropped."""
        if isinstance(message, Reload):
            message.tables |= self.tables
            return True
        return False

    def concerns(self, watched: frozenset[str]) -> bool:
        """Whether a screen reading `watched` tables has anything new to show."""
        return ALL_TABLES in self.tables or bool(self.tables & watched)


class ConsoleContext(Protocol):
    """The running console as screens and widgets see it."""

    settings: Settings
    read_only: bool
    label: str
    actor: str  # who the audit trail says acted: console:<os user>
    data: ConsoleData
    actions: DomainActions
    clock: Callable[[], datetime]
    live_state: str
    updated_at: datetime | None
    findings: list[Finding]  # the latest health check's reasons: the banner shows them

    def say(self, text: str, *, severity: str = "information") -> None:
        """Notify the operator."""
        ...

    def perform(self, action: Action, *, what: str) -> None:
        """Run a mutating action in its own transaction off the UI thread."""
        ...

    async def ask(self, action: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """Run a read-only question (a count for a confirmation) off the UI thread."""
        ...

    def begin_load(self) -> int:
        """A screen begins reading its data: the load's number, for `data_shown`."""
        ...

    async def data_shown(self, screen: object = None, load: int = 0) -> None:
        """A screen (`screen`) finished showing the data of its load number `load`."""
        ...

    async def wake_waiters(self) -> None:
        """Let waiters re-check their condition."""
        ...

    def request_refresh(self) -> None:
        """Refresh the visible screen now."""
        ...


def context_of(node: DOMNode) -> ConsoleContext:
    """The console a widget or screen runs in, typed by its interface."""
    return cast("ConsoleContext", node.app)
