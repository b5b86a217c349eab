"""Execute one email: send its built message through the slot's connection and return a `Result`.

Nothing here writes to the database: the completer (`worker.engine.completer`) records the result.
"""

from __future__ import annotations

import logging

from worker.core import tracing
from worker.core.message import Envelope
from worker.engine.outcomes import Result, decide, failed_locally
from worker.engine.rows import ClaimedEmail
from worker.engine.traces import attempt_attributes
from worker.engine.transport import Transport

log = logging.getLogger("mailroom.worker")

# A message as the sender built it, or why it could not be built (see `Sender.build`).
Built = Envelope | Exception


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
