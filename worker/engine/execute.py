"""Execute one email: build its message as its sender account sends it, send it through the slot's
connection and return a `Result`.

Nothing here writes to the database: the completer (`worker.engine.completer`) records the result.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from worker.core import tracing
from worker.core.campaign_mail import dress_for
from worker.core.dkim import sign_envelope
from worker.core.message import Envelope, build_message
from worker.core.relay_tags import tag_for_relay
from worker.core.return_path import envelope_sender
from worker.engine.outcomes import Result, decide, failed_locally
from worker.engine.rows import ClaimedEmail
from worker.engine.sender_book import Sender
from worker.engine.traces import attempt_attributes
from worker.engine.transport import Transport

log = logging.getLogger("mailroom.worker")

# A message as the sender built it, or why it could not be built (see `build`).
Built = Envelope | Exception


def build(sender: Sender, email: ClaimedEmail) -> Built:
    """The email as it goes on the wire from this sender (DKIM-signed if it has a key), or why it cannot
    be built."""
    try:
        row = email.as_row()
        # An email's own From (within the account's from_domains: the claim made sure), else the account's.
        from_email, from_name = (
            (email.from_email, email.from_name) if email.from_email else (sender.from_email, sender.from_name)
        )
        dress = dress_for(
            row,
            sender=sender.name,
            from_email=from_email,
            sender_postal_address=sender.postal_address,
            campaigns=sender.campaigns,
            default_postal_address=sender.default_postal_address,
            footer_transactional=sender.footer_transactional,
        )
        envelope = build_message(row, from_email, from_name, sender.message_key, dress)
        if not envelope.copies:
            return _for_recipient(sender, envelope, email.id)
        copies = tuple(_for_recipient(sender, c, email.id) for c in envelope.copies)
        first = copies[0]
        return replace(envelope, sender=first.sender, content=first.content, copies=copies)
    except (TypeError, ValueError, AttributeError) as exc:
        return exc


def _for_recipient(sender: Sender, envelope: Envelope, email_id: int) -> Envelope:
    """One message for one recipient: its own return path (else the account's From, where its bounces
    go, whatever the email's own From), the relay's tag, the DKIM signature."""
    if sender.bounce_settings is None:
        if envelope.sender != sender.from_email:
            envelope = replace(envelope, sender=sender.from_email)
    else:
        return_path = envelope_sender(
            sender.bounce_settings, email_id, envelope.recipient, sender.from_email, sender.bounce_domain
        )
        envelope = replace(envelope, sender=return_path)
    if sender.relay_provider is not None:
        envelope = tag_for_relay(envelope, sender.relay_provider, email_id)
    if sender.dkim is not None:
        # Inline on the event loop on purpose (~1 ms a message): see worker.core.dkim.
        envelope = sign_envelope(envelope, sender.dkim)
    return envelope


async def execute(email: ClaimedEmail, built: Built, upcoming: Built | None, connection: Transport) -> Result:
    """Send one built message (announcing the next one); an email that cannot be built, or whose
    sending raised something unexpected (a bug of ours), fails alone with the reason."""
    if isinstance(built, Exception):
        # A row written around the API (a header that is not text, say): fail this email only.
        return failed_locally(email, f"cannot build the message: {built}")
    next_envelope = upcoming if isinstance(upcoming, Envelope) else None
    try:
        with tracing.span("mailroom.send", kind="client") as span:
            attempt = await connection.send(built, next_envelope)
            if span is not None:
                tracing.note(span, attempt_attributes(attempt))
    except Exception as exc:  # ours, not the relay's: this email fails, the worker goes on
        log.exception("email %s: unexpected error while sending", email.id)
        await connection.close()  # the session's state is unknown after that
        return failed_locally(email, f"internal error: {type(exc).__name__}: {exc}")
    return decide(email, attempt, built.message_id)
