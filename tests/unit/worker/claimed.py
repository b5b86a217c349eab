"""A claimed email as the engine holds it, for tests that need one without a database."""

from __future__ import annotations

from datetime import UTC, datetime

from worker.engine.rows import ClaimedEmail


def email(retry_count: int = 0, max_retries: int = 3) -> ClaimedEmail:
    """Email 7 to a@example.com of campaign c1, claimed, with `retry_count` of `max_retries` used."""
    return ClaimedEmail(
        id=7, status="assigned", last_error=None, recipient_email="a@example.com", recipient_name=None,
        subject="Hi", text_body="Hello", html_body=None, headers={}, created_at=datetime.now(UTC),
        retry_count=retry_count, max_retries=max_retries, campaign_id="c1", suppression_reason=None,
        to_extra=None, cc=None, bcc=None, reply_to=None, dropped=None,
    )  # fmt: skip
