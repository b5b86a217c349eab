"""Mailroom's public Python API: enqueue email inside your own PostgreSQL transaction.

    import mailroom, psycopg

    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("INSERT INTO orders ...")
        email_id = mailroom.enqueue(conn, mailroom.EmailRequest(to="ada@example.com", subject="Hi", text="..."))
    # the email exists exactly when the order does; email_id.suppressed: stored suppressed, not sent

Everything named in `__all__` is the stable face; `worker.*` is internal and may move.
Each call has an SQL twin (`mailroom.enqueue(...)` in the database) for applications in other languages.
"""

from __future__ import annotations

from mailroom._cancel import Cancelled, cancel, cancel_async
from mailroom._enqueue import enqueue, enqueue_async, enqueue_many, enqueue_many_async
from mailroom._errors import BatchValidationError, ConfigError, ValidationError
from mailroom._request import EmailRequest
from worker import __version__ as __version__
from worker.core.attachments import Attachment
from worker.core.enqueued import Enqueued

__all__ = [
    "Attachment",
    "BatchValidationError",
    "Cancelled",
    "ConfigError",
    "EmailRequest",
    "Enqueued",
    "ValidationError",
    "cancel",
    "cancel_async",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
]
