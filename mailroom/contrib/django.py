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
from datetime import datetime
from email.mime.base import MIMEBase
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
# The message stream (transactional, broadcast, ...) and the moment after which it is never sent (ISO 8601
# with an offset): Django's EmailMessage has no field for either. Like the key, neither is sent.
STREAM_HEADER = "X-Mailroom-Stream"
EXPIRES_HEADER = "X-Mailroom-Expires-At"
_FIELD_HEADERS = {
    "to", "cc", "reply-to", "from", IDEMPOTENCY_HEADER.lower(), STREAM_HEADER.lower(), EXPIRES_HEADER.lower()
}  # fmt: skip


class EmailBackend(BaseEmailBackend):  # type: ignore[misc]  # Django has no stubs here: Any
    """Enqueues Django's `EmailMessage`s (and `EmailMultiAlternatives`) with `mailroom.enqueue_many`.

    `using` names the database alias to write on (default: the `MAILROOM_DJANGO_DATABASE` setting,
    else `"default"`). Without `fail_silently` the messages of a call are one batch: all or nothing,
    and a refused message raises. With `fail_silently`, as Django's SMTP backend sends each message on
    its own, each is enqueued in a savepoint of its own: a refused message (`ValueError`, Mailroom's
    `ValidationError`, a database error) is skipped, not counted, and the others are enqueued.
    """

    def __init__(self, fail_silently: bool = False, *, using: str | None = None, **kwargs: Any) -> None:
        super().__init__(fail_silently=fail_silently, **kwargs)
        self.using: str = using or getattr(settings, "MAILROOM_DJANGO_DATABASE", None) or "default"

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        """Enqueue the messages; return how many were enqueued.

        Without `fail_silently`: one batch, every message checked before any is written; one refused
        message (`ValueError`, or `mailroom.BatchValidationError` with the message's `index`) raises
        and enqueues none of them. With `fail_silently`: each message on its own, the count of those
        enqueued. A suppressed email or an idempotent repeat counts as enqueued: Mailroom stored (or
        found) it.
        """
        if not email_messages:
            return 0
        if not self.fail_silently:
            requests = [email_request(message) for message in email_messages]
            return len(self._enqueue(requests))
        try:
            return self._enqueue_each(email_messages)
        except DatabaseError:  # the outer transaction itself failed (its commit, say): nothing stored
            return 0

    def _enqueue(self, requests: Iterable[mailroom.EmailRequest]) -> list[mailroom.Enqueued]:
        # A savepoint inside the caller's atomic block, the whole transaction outside one.
        with transaction.atomic(using=self.using):
            connection = self._psycopg_connection()
            # psycopg's errors come out as Django's (IntegrityError, ProgrammingError, ...), and
            # Django learns that its connection saw them.
            with connection.wrap_database_errors:
                return mailroom.enqueue_many(connection.connection, requests)

    def _enqueue_each(self, email_messages: Sequence[EmailMessage]) -> int:
        """Each message in a savepoint of its own inside one `atomic()`; how many were enqueued.

        A failure rolls back only its message's savepoint: the caller's transaction goes on.
        """
        enqueued = 0
        with transaction.atomic(using=self.using):
            connection = self._psycopg_connection()
            for message in email_messages:
                try:
                    request = email_request(message)
                    with transaction.atomic(using=self.using), connection.wrap_database_errors:
                        mailroom.enqueue_many(connection.connection, [request])
                except (ValueError, mailroom.ConfigError, DatabaseError):
                    continue  # fail_silently: this message is not sent, as Django's SMTP backend does
                enqueued += 1
        return enqueued

    def _psycopg_connection(self) -> Any:
        """Django's connection of the alias, connected; `TypeError` unless it holds a psycopg 3 one."""
        connection = connections[self.using]
        connection.ensure_connection()
        if not isinstance(connection.connection, psycopg.Connection):
            raise TypeError(
                f"mailroom.contrib.django.EmailBackend needs database {self.using!r} on Django's"
                f" PostgreSQL backend with psycopg 3, which Mailroom installs; its connection is"
                f" {type(connection.connection).__module__}.{type(connection.connection).__qualname__}"
            )
        return connection


def email_request(message: EmailMessage) -> mailroom.EmailRequest:
    """The `mailroom.EmailRequest` for one Django message; `ValueError` for what Mailroom does not take yet."""
    extra = {str(name): str(value) for name, value in (message.extra_headers or {}).items()}
    header = {name.lower(): value for name, value in extra.items()}
    from_name, from_email = _own_from(message.from_email, header.get("from"))

    to = _recipients("To", message.to, header.get("to"))
    cc = _recipients("Cc", message.cc, header.get("cc"))
    bcc = [_one("Bcc", entry)[1] for entry in message.bcc]
    if "reply-to" in header:
        reply_to = _addresses(header["reply-to"])
    else:
        reply_to = [_one("Reply-To", entry)[1] for entry in message.reply_to]
    text, html = _bodies(message)
    return mailroom.EmailRequest(
        to=[address for _, address in to],
        to_name=(to[0][0] or None) if to else None,
        cc=[address for _, address in cc],
        bcc=bcc,
        reply_to=reply_to,
        subject=str(message.subject),
        text=text,
        html=html,
        headers={name: value for name, value in extra.items() if name.lower() not in _FIELD_HEADERS},
        idempotency_key=header.get(IDEMPOTENCY_HEADER.lower()),
        stream=header.get(STREAM_HEADER.lower()),
        expires_at=_moment(header.get(EXPIRES_HEADER.lower())),
        attachments=[_attachment(given) for given in message.attachments] or None,
        from_email=from_email,
        from_name=from_name,
    )


def _moment(value: str | None) -> datetime | None:
    """The `X-Mailroom-Expires-At` header's moment: ISO 8601 with its offset."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"{EXPIRES_HEADER}: {value!r} is not an ISO 8601 time; nothing was enqueued"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(
            f"{EXPIRES_HEADER}: give the offset too (2026-11-28T12:00:00+00:00); nothing was enqueued"
        )
    return moment


def _attachment(given: Any) -> mailroom.Attachment:
    """One of Django's attachments as Mailroom's: a (filename, content, mimetype) tuple (`attach`,
    `attach_file`; an `EmailAttachment` from 5.2), or a MIME part (`attach(MIMEImage(...))`), whose
    Content-ID makes it inline (the HTML shows it as cid:...)."""
    if isinstance(given, MIMEBase):
        content = given.get_payload(decode=True)
        if not isinstance(content, bytes):
            raise ValueError(
                "a multipart attachment is not supported (attach its parts); nothing was enqueued"
            )
        content_id = str(given["Content-ID"]).strip().strip("<>") if given["Content-ID"] else None
        filename = given.get_filename() or content_id or "attachment"
        return mailroom.Attachment(filename, content, given.get_content_type(), content_id)
    filename, content, mimetype = given[0], given[1], given[2]
    if isinstance(content, str):  # Django encodes a text attachment in its DEFAULT_CHARSET
        content = content.encode(str(getattr(settings, "DEFAULT_CHARSET", "utf-8") or "utf-8"))
    return mailroom.Attachment(
        str(filename or "attachment"), bytes(content), str(mimetype) if mimetype else None
    )


def _own_from(from_email: str | None, from_header: str | None) -> tuple[str | None, str | None]:
    """The message's own From as (display name, address), or (None, None) for the From the operator
    configured (`DEFAULT_FROM_EMAIL`, or `SERVER_EMAIL`, which `mail_admins`, `mail_managers` and
    `AdminEmailHandler` send from) or none: then the sender account's From goes out. Another From is
    the email's own, which Mailroom refuses unless a sender account may send for its domain."""
    default = str(getattr(settings, "DEFAULT_FROM_EMAIL", "") or "").strip()
    server = str(getattr(settings, "SERVER_EMAIL", "") or "").strip()
    given = [
        str(g).strip() for g in (from_header, from_email) if g and str(g).strip() not in (default, server)
    ]
    if not given:
        return None, None
    if len(given) == 2 and _one("From", given[0])[1].lower() != _one("From", given[1])[1].lower():
        raise ValueError(
            f"a From header ({given[0]!r}) that differs from from_email ({given[1]!r}) is not supported;"
            f" nothing was enqueued"
        )
    name, address = _one("From", given[0])
    return name or None, address


def _recipients(name: str, listed: Sequence[str], header: str | None) -> list[tuple[str, str]]:
    """The (display name, address) of the message's list, or of its header when the list is empty;
    both must agree."""
    pairs = [_one(name, entry) for entry in listed]
    if header is None:
        return pairs
    from_header = _pairs(header)
    if pairs and [address for _, address in pairs] != [address for _, address in from_header]:
        raise ValueError(
            f"a {name} header that differs from the message's {name.lower()} list is not supported:"
            f" Mailroom writes {name} from the recipients; nothing was enqueued"
        )
    return pairs or from_header


def _one(name: str, entry: str) -> tuple[str, str]:
    """The (display name, address) of one entry of a recipient list, which must hold exactly one
    address, as Django requires: `"Ada <a@x.com>, b@y.com"` is refused, not cut to its first."""
    pairs = getaddresses([str(entry)])
    if len(pairs) != 1:
        raise ValueError(
            f"each {name} entry must be exactly one address, not {len(pairs)}: {str(entry)!r}; give"
            f" every address its own entry of the list; nothing was enqueued"
        )
    return pairs[0]


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
