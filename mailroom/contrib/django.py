"""A Django email backend that enqueues each message with Mailroom in Django's own transaction.

    EMAIL_BACKEND = "mailroom.contrib.django.EmailBackend"

`send_mail()` and `EmailMessage.send()` then write the email on the connection of Django's database
alias (`MAILROOM_DJANGO_DATABASE`, default `"default"`), inside `transaction.atomic()`: in the
caller's `atomic()` block the email commits or rolls back with it (a rolled-back inner block takes
only its own email); outside any, each `send_messages` call is its own transaction. The worker,
running elsewhere, delivers it.

Only a Django project imports this module: `import mailroom` never loads Django.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from email.utils import getaddresses
from typing import Any

import psycopg
from django.conf import settings
from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend
from django.db import DatabaseError, connections, transaction

import mailroom

IDEMPOTENCY_HEADER = "X-Mailroom-Idempotency-Key"

# Headers Django lets a message override that are fields of an `EmailRequest`, not extra headers.
_FIELD_HEADERS = {"to", "cc", "reply-to", "from", IDEMPOTENCY_HEADER.lower()}


class EmailBackend(BaseEmailBackend):  # type: ignore[misc]  # Django has no stubs here: Any
    """Enqueues Django's `EmailMessage`s (and `EmailMultiAlternatives`) with `mailroom.enqueue_many`.

    `using` names the database alias to write on (default: the `MAILROOM_DJANGO_DATABASE` setting,
    else `"default"`). With `fail_silently`, a refused message or a database error makes the call
    return 0 instead of raising; what is not supported yet (attachments, a From of the message's own)
    raises `ValueError` either way, so that nothing is dropped without a word.
    """

    def __init__(self, fail_silently: bool = False, *, using: str | None = None, **kwargs: Any) -> None:
        super().__init__(fail_silently=fail_silently, **kwargs)
        self.using: str = using or getattr(settings, "MAILROOM_DJANGO_DATABASE", None) or "default"

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        """Enqueue the messages as one batch; return how many were enqueued (all of them, or 0).

        Every message is checked before any is written: one refused message (`mailroom.ValidationError`,
        with the message's `index`) enqueues none of them.
        """
        if not email_messages:
            return 0
        requests = [email_request(message) for message in email_messages]
        try:
            return len(self._enqueue(requests))
        except (mailroom.ValidationError, mailroom.ConfigError, DatabaseError):
            if not self.fail_silently:
                raise
            return 0

    def _enqueue(self, requests: Iterable[mailroom.EmailRequest]) -> list[mailroom.Enqueued]:
        connection = connections[self.using]
        # A savepoint inside the caller's atomic block, the whole transaction outside one: a failure
        # (even one fail_silently swallows) leaves the caller's transaction usable.
        with transaction.atomic(using=self.using):
            connection.ensure_connection()
            if not isinstance(connection.connection, psycopg.Connection):
                raise TypeError(
                    f"mailroom.contrib.django.EmailBackend needs database {self.using!r} on Django's"
                    f" PostgreSQL backend with psycopg 3, which Mailroom installs; its connection is"
                    f" {type(connection.connection).__module__}.{type(connection.connection).__qualname__}"
                )
            # psycopg's errors come out as Django's (IntegrityError, ProgrammingError, ...), and
            # Django learns that its connection saw them.
            with connection.wrap_database_errors:
                return mailroom.enqueue_many(connection.connection, requests)


def email_request(message: EmailMessage) -> mailroom.EmailRequest:
    """The `mailroom.EmailRequest` for one Django message; `ValueError` for what Mailroom does not take yet."""
    if message.attachments:
        raise ValueError("attachments are not supported yet; nothing was enqueued")
    extra = {str(name): str(value) for name, value in (message.extra_headers or {}).items()}
    header = {name.lower(): value for name, value in extra.items()}
    _check_from(message.from_email, header.get("from"))

    to = _recipients("To", message.to, header.get("to"))
    cc = _recipients("Cc", message.cc, header.get("cc"))
    reply_to = _addresses(header["reply-to"]) if "reply-to" in header else _bare(message.reply_to)
    text, html = _bodies(message)
    first_name, first = getaddresses(to[:1])[0] if to else ("", "")
    return mailroom.EmailRequest(
        to=[first, *_bare(to[1:])] if to else [],
        to_name=first_name or None,
        cc=_bare(cc),
        bcc=_bare(message.bcc),
        reply_to=reply_to,
        subject=str(message.subject),
        text=text,
        html=html,
        headers={name: value for name, value in extra.items() if name.lower() not in _FIELD_HEADERS},
        idempotency_key=header.get(IDEMPOTENCY_HEADER.lower()),
    )


def _check_from(from_email: str | None, from_header: str | None) -> None:
    """Accept the From the operator configured senders for (`DEFAULT_FROM_EMAIL`), or none."""
    default = str(getattr(settings, "DEFAULT_FROM_EMAIL", "") or "").strip()
    for given in (from_email, from_header):
        if given and str(given).strip() != default:
            raise ValueError(
                f"a From per email is not supported yet: Mailroom sends with the From of the sender"
                f" account; leave from_email empty or set it to DEFAULT_FROM_EMAIL ({default!r}),"
                f" not {str(given)!r}; nothing was enqueued"
            )


def _recipients(name: str, listed: Sequence[str], header: str | None) -> list[str]:
    """The message's list, or its header's addresses when the list is empty; both must agree."""
    if header is None:
        return [str(address) for address in listed]
    from_header = [f"{display} <{address}>" if display else address for display, address in _pairs(header)]
    if listed and _bare(listed) != _bare(from_header):
        raise ValueError(
            f"a {name} header that differs from the message's {name.lower()} list is not supported:"
            f" Mailroom writes {name} from the recipients; nothing was enqueued"
        )
    return from_header if not listed else [str(address) for address in listed]


def _bodies(message: EmailMessage) -> tuple[str | None, str | None]:
    """The plain-text and HTML bodies: the body by its subtype, an alternative by its MIME type."""
    body = str(message.body) if message.body else None
    text, html = (None, body) if message.content_subtype == "html" else (body, None)
    for alternative in getattr(message, "alternatives", None) or []:
        # (content, mimetype): a tuple in Django 5.2, an EmailAlternative named tuple from 6.0.
        content, mimetype = alternative[0], str(alternative[1]).lower()
        if mimetype == "text/html" and html is None:
            html = str(content)
        elif mimetype == "text/plain" and text is None:
            text = str(content)
        else:
            raise ValueError(
                f"an alternative of type {mimetype} is not supported (one text/plain and one text/html"
                f" body at most); nothing was enqueued"
            )
    return text, html


def _pairs(header: str) -> list[tuple[str, str]]:
    return [(display, address) for display, address in getaddresses([header]) if address]


def _addresses(header: str) -> list[str]:
    return [address for _, address in _pairs(header)]


def _bare(addresses: Iterable[str]) -> list[str]:
    """The addresses without display names (only the first To's name is kept, as `to_name`)."""
    return [address for _, address in getaddresses([str(a) for a in addresses])]
