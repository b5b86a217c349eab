"""The public `EmailRequest`: the engine's request under the name and documentation applications see."""

from __future__ import annotations

from worker.core import outbox


class EmailRequest(outbox.EmailRequest):
    """One email to enqueue: its recipients and either literal content or a template with its data.

    Build it with keywords; it is immutable (use `dataclasses.replace` for a variant).
    Nothing is checked until it is enqueued: `enqueue` raises `ValidationError` naming the
    field at fault.

    Recipients:
        to: one address, or a list of addresses. The first is the email's recipient in
            `mailroom.my_emails`, logs and suppression; the others are further To addresses.
        to_name: the display name of the first To address (plain text, at most 255 characters).
        cc, bcc, reply_to: lists of addresses. Bcc goes in the SMTP envelope only, never in a
            header. To, Cc and Bcc together hold at most `MAILROOM_MAX_RECIPIENTS` (default 50).

    Content, literal:
        subject: required (stripped of surrounding white space; at most
            `MAILROOM_MAX_SUBJECT_CHARS`, default 998).
        text, html: the plain-text and HTML bodies; at least one is required, together at
            most `MAILROOM_MAX_BODY_BYTES` (UTF-8, default 10 MiB).
        headers: extra header names to values. Headers Mailroom writes itself (From, To,
            Message-ID, ...) and relay-control, trace and authentication headers are refused;
            no value may hold a control character or line break.

    Content, from a template (rendered now, so what is stored is what is sent):
        template: the template's name (a row of `mailroom.templates`, or a built-in one).
        locale: like `"fr"` or `"pt-BR"`; falls back to its language, then the default locale.
        data: the values the template uses (JSON-serialisable).
        A `subject`, `text` or `html` given beside a template wins over the template's.

    Delivery:
        priority: -1000 to 1000 (default 0); higher is sent first.
        scheduled_for: a time zone-aware `datetime`; the email is not sent before it
            (default: now).
        max_retries: how many times a temporary failure is retried, 0 to 100 (default
            `MAILROOM_MAX_RETRIES`, 5).
        idempotency_key: 1 to 255 characters. Enqueuing the same key again from the same
            database role returns the first email's id and stores nothing new.
        expires_at: a time zone-aware `datetime` after which the email is never sent (a one-time
            code's expiry): it ends `failed` as expired, with the reason. Must be later than
            `scheduled_for` (or now). `mailroom.cancel` stops an email before that.

    Where it leaves from:
        stream: the message stream (a name like `"transactional"`); only a sender account serving
            it sends the email, so campaign mail never leaves through the relay of password resets.
            Default: `"transactional"`, or `"broadcast"` for email that is not transactional.
        from_email, from_name: the email's own From and its display name (default: the sending
            account's). Its domain must be one a sender account of the email's stream may send for
            (`mailroom senders edit NAME --from-domain DOMAIN`); `enqueue` refuses it otherwise.

    Files:
        attachments: a list of `mailroom.Attachment(filename, content, content_type=None,
            content_id=None)`. A file with a `content_id` is an inline image the HTML shows as
            `<img src="cid:...">`. At most 100 files, each at most `MAILROOM_MAX_ATTACHMENT_BYTES`
            (default 10 MiB) and together at most `MAILROOM_MAX_ATTACHMENTS_BYTES` (15 MiB); the
            filename is a name, never a path. Each content is stored once however many emails carry it.

    Kind and bookkeeping:
        campaign_id: marks campaign email (at most 100 characters): it gets an unsubscribe
            link and headers, honours the unsubscribe list, and is tracked by default.
        transactional: whether the email is transactional (default: true unless a
            `campaign_id` is given). Email that is not gets unsubscribe headers.
        track: open and click tracking; `None` means on for campaign email when
            `MAILROOM_TRACK_CAMPAIGNS` is on, off otherwise.
        reference_type, reference_id: your own pointer to what the email is about (for
            example `"order"`, `"42"`), shown in `mailroom.my_emails`.
    """

    # Shown, and pickled, under its public name.
    __module__ = "mailroom"
