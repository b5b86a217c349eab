"""Actions that say what will happen: count first, ask with the count and the consequence, then act.

Used by every screen that retries or cancels email or suspends or resumes a sender (Failures, the email
detail, Senders, the command palette), so the question and the action are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.screen import Screen

from console.context import context_of
from console.widgets.dialogs import ConfirmScreen
from worker.ops.preview import Preview, cancel_preview, retry_preview, sender_preview


def _emails(n: int) -> str:
    return f"{n:,} email" + ("" if n == 1 else "s")


def retry_question(p: Preview, *, every: bool) -> str:
    """'Retry 12 emails? ... 3 are to suppressed addresses and will be suppressed again.'"""
    which = "every failed email" if every else _emails(p.changed)
    text = f"Retry {which} ({p.changed:,})?" if every else f"Retry {which}?"
    text += (
        " They go back to the queue with a fresh retry budget."
        if p.changed != 1
        else (" It goes back to the queue with a fresh retry budget.")
    )
    if p.suppressed:
        are = "is" if p.suppressed == 1 else "are"
        text += (
            f" {p.suppressed:,} {are} to suppressed addresses (bounced or unsubscribed)"
            " and will be suppressed again."
        )
    return text


def cancel_question(p: Preview) -> str:
    """'Cancel 3 emails? They will never be sent ...'"""
    text = f"Cancel {_emails(p.changed)}? {'It' if p.changed == 1 else 'They'} will never be sent."
    if p.pending:
        text += f" {p.pending:,} {'was' if p.pending == 1 else 'were'} still waiting to be sent."
    if p.in_flight:
        text += (
            f" {_emails(p.in_flight)} being sent right now {'is' if p.in_flight == 1 else 'are'} left as is."
        )
    return text


def suspend_question(name: str, p: Preview) -> str:
    """Suspending a sender: what stops, and whether mail still flows."""
    text = f"Suspend sender {name}? Nothing is sent through it until it is resumed."
    if p.others:
        text += f" {p.others} other sender(s) carry on."
    else:
        text += f" It is the last usable sender: {_emails(p.due)} due now will wait until one is resumed."
    return text


def resume_question(name: str, p: Preview) -> str:
    """Resuming a sender: it sends again from now."""
    status = p.status.replace("_", " ")
    return f"Resume sender {name} (now {status})? It sends again from now; {_emails(p.due)} {'is' if p.due == 1 else 'are'} due."


async def confirm_retry(screen: Screen[Any], ids: Sequence[int] | None, *, aside: str = "") -> bool:
    """Count, ask, and retry the emails `ids` (None: every failed email); whether it was done.

    `aside` is added to the question (what the action leaves alone)."""
    from worker.ops.actions import retry, retry_all_failed

    console = context_of(screen)
    wanted = None if ids is None else list(ids)
    preview: Preview = await console.ask(lambda conn: retry_preview(conn, wanted))
    if not preview.changed:
        console.say("nothing to retry: only failed or suppressed email can be retried", severity="warning")
        return False
    question = retry_question(preview, every=wanted is None) + aside
    if not await screen.app.push_screen_wait(ConfirmScreen(question, confirm="Retry")):
        return False
    actor = console.actor
    if wanted is None:
        console.perform(lambda c: retry_all_failed(c, actor=actor).summary("retried"), what="retry all")
    else:
        console.perform(lambda c: retry(c, wanted, actor=actor).summary("retried"), what="retry")
    return True


async def confirm_cancel(screen: Screen[Any], ids: Sequence[int]) -> bool:
    """Count, ask, and cancel the emails `ids`; whether it was done."""
    from worker.ops.actions import cancel

    console = context_of(screen)
    wanted = list(ids)
    preview: Preview = await console.ask(lambda conn: cancel_preview(conn, wanted))
    if not preview.changed:
        console.say("nothing to cancel: email being sent, sent or cancelled stays as is", severity="warning")
        return False
    confirm = f"Cancel {_emails(preview.changed)}"
    if not await screen.app.push_screen_wait(
        ConfirmScreen(cancel_question(preview), confirm=confirm, destructive=True)
    ):
        return False
    actor = console.actor
    console.perform(lambda c: cancel(c, wanted, actor=actor).summary("cancelled"), what="cancel")
    return True


async def confirm_sender(screen: Screen[Any], name: str, target: str) -> bool:
    """Count, ask, and suspend (target 'suspended') or resume (target 'active') one sender."""
    from worker.ops.senders import set_sender_status

    console = context_of(screen)
    now = console.clock()
    preview: Preview = await console.ask(lambda conn: sender_preview(conn, name, now=now))
    suspend = target == "suspended"
    question = suspend_question(name, preview) if suspend else resume_question(name, preview)
    label = "Suspend" if suspend else "Resume"
    if not await screen.app.push_screen_wait(ConfirmScreen(question, confirm=label, destructive=suspend)):
        return False
    actor, verb = console.actor, "suspended" if suspend else "resumed"

    def act(conn: Any) -> str:
        reason = f"{verb} from the console" if suspend else None
        status = set_sender_status(conn, name, target, reason, actor=actor)
        return f"sender account {name} is now {status.replace('_', ' ')}"

    console.perform(act, what=f"{label.lower()} {name}")
    return True
