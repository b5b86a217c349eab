"""The producers' operator actions, given to the console by the command line that starts it."""

from __future__ import annotations

from typing import Any

import psycopg

from worker.core.config import Settings
from worker.core.results import ActionResult


class ProducerActions:
    """`console.context.DomainActions` through the lifecycle and documents producers."""

    def suspend_accounts(self, conn: psycopg.Connection[Any], ids: list[int]) -> ActionResult:
        """Suspend user accounts."""
        from worker.producers.lifecycle import suspend_accounts

        return suspend_accounts(conn, ids)

    def unsuspend_accounts(self, conn: psycopg.Connection[Any], ids: list[int]) -> ActionResult:
        """Lift user accounts' suspension."""
        from worker.producers.lifecycle import unsuspend_accounts

        return unsuspend_accounts(conn, ids)

    def resend_activation(
        self, conn: psycopg.Connection[Any], ids: list[int], settings: Settings
    ) -> ActionResult:
        """Issue provisioned accounts a fresh activation token."""
        from worker.producers.lifecycle import resend_activation

        return resend_activation(conn, ids, settings)

    def reminder_candidates(self, conn: psycopg.Connection[Any], doc_id: str, settings: Settings) -> int:
        """How many signers of a document a reminder would mail now."""
        from worker.producers.documents.signatures import reminder_candidates

        return int(reminder_candidates(conn, doc_id, settings=settings))

    def send_reminders(self, conn: psycopg.Connection[Any], doc_id: str, settings: Settings) -> str:
        """Mail a document's missing signers; a one-line summary."""
        from worker.producers.documents.signatures import send_reminders

        return send_reminders(conn, doc_id, requested_by="console", settings=settings).summary()
